#!/usr/bin/env python3
"""Writes the two synthetic hwloc 2 XML topologies of this directory (see README.md): shapes that no saved
export has. Run from this directory: python3 make_synthetic.py. The output is committed; rerun only to change it.

The object layout follows what hwloc 2 exports for these machines (compare `lstopo --of xml` of a synthetic
description such as "pack:1 group:4 [numa] [numa] core:16 pu:4"): NUMA nodes are memory children of the Group of
the cores they serve, PCI trees hang off the Group or Package they are local to.
"""


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0

    def next_gp(self):
        self.gp += 1
        return self.gp

    def open(self, depth, attributes):
        self.lines.append("  " * depth + "<object " + attributes + ' gp_index="%d">' % self.next_gp())

    def leaf(self, depth, attributes):
        self.lines.append("  " * depth + "<object " + attributes + ' gp_index="%d"/>' % self.next_gp())

    def close(self, depth):
        self.lines.append("  " * depth + "</object>")


def mask(ids):
    """hwloc's bitmap text: comma-separated 32-bit words, most significant first."""
    value = 0
    for i in ids:
        value |= 1 << i
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


def sets(cpus, nodes):
    c, n = mask(cpus), mask(nodes)
    return 'cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n)


def numa(w, depth, os_index, cpus, nodes_of_parent, memory, subtype=None):
    extra = ' subtype="%s"' % subtype if subtype else ""
    w.lines.append(
        "  " * depth
        + '<object type="NUMANode" os_index="%d"%s %s local_memory="%d" gp_index="%d">'
        % (os_index, extra, sets(cpus, [os_index]), memory, w.next_gp())
    )
    w.lines.append("  " * (depth + 1) + '<page_type size="4096" count="%d"/>' % (memory // 4096))
    w.close(depth)


def cores(w, depth, core_ids, threads_of, nodes):
    for core in core_ids:
        pus = threads_of(core)
        w.open(depth, 'type="Core" os_index="%d" %s' % (core, sets(pus, nodes)))
        for pu in pus:
            w.leaf(depth + 1, 'type="PU" os_index="%d" %s' % (pu, sets([pu], nodes)))
        w.close(depth)


def pcidev(w, depth, bus, dev, pci_type, osdevs=()):
    busid = "0000:%02x:%02x.0" % (bus, dev)
    if not osdevs:
        w.leaf(depth, 'type="PCIDev" pci_busid="%s" pci_type="%s" pci_link_speed="31.507692"' % (busid, pci_type))
        return
    w.open(depth, 'type="PCIDev" pci_busid="%s" pci_type="%s" pci_link_speed="31.507692"' % (busid, pci_type))
    for name, osdev_type in osdevs:
        w.leaf(depth + 1, 'type="OSDev" name="%s" osdev_type="%d"' % (name, osdev_type))
    w.close(depth)


def bridge(w, depth, bus, dev, secondary, subordinate, bridge_depth):
    w.open(
        depth,
        'type="Bridge" bridge_type="1-1" depth="%d" bridge_pci="0000:[%02x-%02x]" pci_busid="0000:%02x:%02x.0" '
        'pci_type="0604 [8086:352a] [0000:0000] 04" pci_link_speed="31.507692"'
        % (bridge_depth, secondary, subordinate, bus, dev),
    )


def host_bridge(w, depth, first, last):
    w.open(depth, 'type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]"' % (first, last))


def header(w, description, cpus, nodes):
    w.lines += ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                '<topology version="2.0">']
    c, n = mask(cpus), mask(nodes)
    w.lines.append(
        '  <object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" allowed_cpuset="%s" nodeset="%s" '
        'complete_nodeset="%s" allowed_nodeset="%s" gp_index="%d">' % (c, c, c, n, n, n, w.next_gp())
    )
    w.lines.append('    <info name="Backend" value="Synthetic"/>')
    w.lines.append('    <info name="SyntheticDescription" value="%s (written by make_synthetic.py)"/>' % description)


def footer(w):
    w.lines += ["  </object>", "</topology>"]


def knl_7250_snc4_flat():
    """Xeon Phi 7250: 68 cores x 4 threads, SNC-4: quadrants of 9, 9, 8 and 8 tiles (18, 18, 16, 16 cores), each
    with its DDR node (0-3) and, in flat mode, an MCDRAM node (4-7) without CPUs of its own. Linux numbers CPU
    core + 68 * thread. One Ethernet port on the package."""
    w = Writer()
    per_quadrant = [18, 18, 16, 16]
    threads = lambda core: [core + 68 * t for t in range(4)]
    all_cpus = list(range(272))
    header(w, "KNL 7250 SNC-4 flat", all_cpus, range(8))
    w.open(2, 'type="Package" os_index="0" %s' % sets(all_cpus, range(8)))
    first = 0
    for q, count in enumerate(per_quadrant):
        core_ids = list(range(first, first + count))
        cpus = sorted(c for core in core_ids for c in threads(core))
        w.open(3, 'type="Group" %s kind="10" subkind="0"' % sets(cpus, [q, q + 4]))
        numa(w, 4, q, cpus, [q, q + 4], 24 << 30)
        numa(w, 4, q + 4, cpus, [q, q + 4], 4 << 30, "MCDRAM")
        cores(w, 4, core_ids, threads, [q, q + 4])
        w.close(3)
        first += count
    host_bridge(w, 3, 0x00, 0x01)
    bridge(w, 4, 0x00, 0x1c, 0x01, 0x01, 0)
    pcidev(w, 5, 0x01, 0x00, "0200 [8086:1533] [8086:0000] 03", [("eno1", 2)])
    w.close(4)
    w.close(3)
    w.close(2)
    footer(w)
    return w.lines


def spr_snc4_8gpu():
    """Two Xeon 8480+ (56 cores x 2 threads) in SNC-4: four NUMA domains of 14 cores per socket. Linux numbers
    socket 0's cores 0-55 and socket 1's 56-111, their second threads +112. Each domain has one host bridge with a
    PCIe switch holding an H100 (10de:2330, class 0302) and a ConnectX-7 InfiniBand HCA (15b3:1021, class 0207,
    mlx5_N with its IPoIB interface ibpN), like an 8-GPU server with one HCA per GPU; socket 0's first domain
    also has an Ethernet port (eth0) on its own root port."""
    w = Writer()
    threads = lambda core: [core, core + 112]
    all_cpus = list(range(224))
    header(w, "2x Sapphire Rapids SNC-4, 8x H100, 8x CX-7", all_cpus, range(8))
    for socket in range(2):
        socket_cores = range(socket * 56, socket * 56 + 56)
        socket_cpus = sorted(c for core in socket_cores for c in threads(core))
        nodes = range(socket * 4, socket * 4 + 4)
        w.open(2, 'type="Package" os_index="%d" %s' % (socket, sets(socket_cpus, nodes)))
        for d in range(4):
            domain = socket * 4 + d
            core_ids = list(range(socket * 56 + d * 14, socket * 56 + d * 14 + 14))
            cpus = sorted(c for core in core_ids for c in threads(core))
            w.open(3, 'type="Group" %s kind="10" subkind="0"' % sets(cpus, [domain]))
            numa(w, 4, domain, cpus, [domain], 64 << 30)
            cores(w, 4, core_ids, threads, [domain])
            base = 0x10 + 0x20 * domain
            last = base + (5 if domain == 0 else 4)
            host_bridge(w, 4, base, last)
            bridge(w, 5, base, 0x01, base + 1, base + 4, 0)  # root port
            bridge(w, 6, base + 1, 0x00, base + 2, base + 4, 1)  # switch, upstream port
            bridge(w, 7, base + 2, 0x00, base + 3, base + 3, 2)  # downstream port: the GPU
            pcidev(w, 8, base + 3, 0x00, "0302 [10de:2330] [10de:16c1] a1")
            w.close(7)
            bridge(w, 7, base + 2, 0x01, base + 4, base + 4, 2)  # downstream port: the HCA
            pcidev(w, 8, base + 4, 0x00, "0207 [15b3:1021] [15b3:0041] 00",
                   [("ibp%ds0" % (base + 4), 2), ("mlx5_%d" % domain, 3)])
            w.close(7)
            w.close(6)
            w.close(5)
            if domain == 0:
                bridge(w, 5, base, 0x02, base + 5, base + 5, 0)
                pcidev(w, 6, base + 5, 0x00, "0200 [8086:1593] [8086:0002] 02", [("eth0", 2)])
                w.close(5)
            w.close(4)
            w.close(3)
        w.close(2)
    footer(w)
    return w.lines


if __name__ == "__main__":
    for name, lines in (("synthetic-knl7250-snc4-flat.xml", knl_7250_snc4_flat()),
                        ("synthetic-spr-snc4-8xH100-8xcx7.xml", spr_snc4_8gpu())):
        with open(name, "w") as out:
            out.write("\n".join(lines) + "\n")
