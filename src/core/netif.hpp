#pragma once
// The one socket interface a task exports as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME. Gloo takes a single
// interface name (not NCCL's "^docker,lo" lists), and it must be up and reach MASTER_ADDR, or the rendezvous
// hangs. Read from the running system without sending any traffic.
//
//   per node  read_network(): the interfaces and the kernel's route to the master
//   per task  choose_socket_interface(): a lookup in that view
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct IpAddress {
  int family = 0;                   // AF_INET or AF_INET6
  std::array<uint8_t, 16> bytes{};  // network order; IPv4 in the first 4
  unsigned prefix_length = 0;       // from the netmask
};

std::string to_string(const IpAddress& address);  // numeric: "10.0.0.5", "fe80::1"
bool is_link_local(const IpAddress& address);     // fe80::/10, which needs a scope to be used

struct Interface {
  std::string name;
  bool up = false;           // administratively up (IFF_UP) with a link (IFF_RUNNING)
  bool switched_on = false;  // administratively up: with `up` false, it has no carrier
  bool loopback = false;
  std::vector<IpAddress> addresses;
};

struct NetworkView {
  std::vector<Interface> interfaces;  // by name
  std::string master_address;         // numeric IPv4 or IPv6
  std::string route;                  // the interface the kernel's routing table uses towards master_address
};

// This node's name (gethostname): what Slurm, torchrun's error files and the ranks' reports call it.
std::string host_name();

// getifaddrs(), merged per interface, by name. Throws ddp::Error when the kernel cannot list them.
std::vector<Interface> list_interfaces();
const Interface* find_interface(const std::vector<Interface>& interfaces, const std::string& name);
// Whether one of `interfaces` holds `numeric_address` (which must be numeric; throws NetError otherwise).
bool holds_address(const std::vector<Interface>& interfaces, const std::string& numeric_address);

// What other nodes can reach this one at, for a rendezvous it hosts: the first IPv4 address of the first of
// `socket_ifnames` (GLOO_SOCKET_IFNAME's entries), else this node's host name. Throws ddp::Error naming an
// interface without an IPv4 address.
std::string advertised_address(const std::vector<std::string>& socket_ifnames);

// The interface of `interfaces` the kernel routes traffic to `master_address` (numeric) through. Throws
// ddp::Error naming the address when there is no route or no interface holds the source address.
std::string route_to(const std::vector<Interface>& interfaces, const std::string& master_address);

// `master_address` must be numeric (resolve_host() gives that). The route comes from connect() on a UDP
// socket, which picks a route and source address without sending a packet, and the interface holding that
// source address (route_to). Throws ddp::Error when the master is unreachable from this node.
NetworkView read_network(const std::string& master_address);

enum class SocketReason {
  Override,       // --ddp-nic=NAME
  ClosestNic,     // the task's closest NIC by topology, up and on the master's subnet (or its route)
  Route,          // the interface the kernel routes master traffic through
  OnlyInterface,  // the master is a loopback alias of this node; the only other interface that is up
};
const char* to_string(SocketReason reason);

struct SocketInterface {
  std::string name;
  SocketReason reason = SocketReason::Route;
};

// Prefers `preferred` (the task's closest NIC, by name) when it is up and reaches the master, else the route.
// `override_name` must exist, be up and have an address. When the master is a loopback alias of this node
// (a "127.0.1.1 host" line) and the step spans nodes, lo cannot be the answer: peers would be told 127.0.0.1.
// Throws ddp::Error naming the interface and listing the node's interfaces.
SocketInterface choose_socket_interface(const NetworkView& network, const std::optional<std::string>& preferred,
                                        const std::optional<std::string>& override_name, bool multi_node);

// "eth0 (up), ib0 (down), lo (up)", for messages.
std::string describe_interfaces(const std::vector<Interface>& interfaces);

}  // namespace ddp
