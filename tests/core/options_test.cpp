#include "spank_plugin/step/options.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;

size_t index_of(const std::string& name) {
  const auto& table = option_table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].name == name) return i;
  }
  ADD_FAILURE() << "no option " << name;
  return table.size();
}

TEST(Options, DdpTakesAnOptionalBackend) {
  Options options;
  apply_option(options, index_of("ddp"), nullptr);
  EXPECT_TRUE(options.enabled);
  EXPECT_FALSE(options.backend.has_value());
  apply_option(options, index_of("ddp"), "nccl");
  EXPECT_EQ(options.backend, Backend::Nccl);
  apply_option(options, index_of("ddp"), "mpi");
  EXPECT_EQ(options.backend, Backend::Mpi);
}

TEST(Options, NullTextFromSbatchMeansNoArgument) {
  Options options;
  apply_option(options, index_of("ddp"), "gloo");
  apply_option(options, index_of("ddp"), "(null)");
  EXPECT_TRUE(options.enabled);
  EXPECT_FALSE(options.backend.has_value());
  apply_option(options, index_of("ddp"), "gloo");
  apply_option(options, index_of("ddp"), "");  // srun's optional argument left out
  EXPECT_FALSE(options.backend.has_value());
}

TEST(Options, LaterValueOverridesInheritedOne) {
  Options options;
  apply_option(options, index_of("ddp"), "gloo");  // #SBATCH --ddp=gloo, through the job environment
  apply_option(options, index_of("ddp"), "off");   // srun --ddp=off
  EXPECT_FALSE(options.enabled);
  apply_option(options, index_of("ddp-port"), "23456");
  apply_option(options, index_of("ddp-port"), "auto");
  EXPECT_FALSE(options.master_port.has_value());
}

TEST(Options, RejectsBadValuesNamingThem) {
  Options options;
  EXPECT_EQ(error_of([&] { apply_option(options, index_of("ddp"), "tcp"); }),
            "unknown --ddp backend 'tcp'; use one of auto|gloo|nccl|mpi, or off");
  for (const char* bad : {"0", "80", "65536", "-1", "12a", "", " 2000", "99999999999999999999999"}) {
    const std::string message = error_of([&] { apply_option(options, index_of("ddp-port"), bad); });
    EXPECT_EQ(message, "--ddp-port value '" + std::string(bad) + "' is not a whole number from 1024 to 65535");
  }
  apply_option(options, index_of("ddp-port"), "29500");
  EXPECT_EQ(options.master_port, 29500);
}

TEST(Options, BindNicAndCheck) {
  Options options;
  apply_option(options, index_of("ddp-bind"), "none");
  EXPECT_EQ(options.bind, BindMode::None);
  apply_option(options, index_of("ddp-nic"), "ib0");
  EXPECT_EQ(options.nic, "ib0");
  apply_option(options, index_of("ddp-nic"), "auto");
  EXPECT_FALSE(options.nic.has_value());
  apply_option(options, index_of("ddp-check"), nullptr);
  EXPECT_TRUE(options.check);
  EXPECT_EQ(error_of([&] { apply_option(options, index_of("ddp-bind"), "nearest"); }),
            "unknown --ddp-bind mode 'nearest'; use closest or none");
  EXPECT_EQ(error_of([&] { apply_option(options, index_of("ddp-nic"), "eth0;reboot"); }),
            "--ddp-nic value 'eth0;reboot' is not a network interface name; give one like eth0, or auto");
  EXPECT_NE(error_of([&] { apply_option(options, index_of("ddp-nic"), "averyveryverylongname0"); }), "");
}

TEST(Options, ADdpStepEndsWhenATaskFailsUnlessKeepGoing) {
  Options options;
  EXPECT_FALSE(kill_on_bad_exit(options)) << "steps without --ddp keep slurm.conf's KillOnBadExit";
  apply_option(options, index_of("ddp"), nullptr);
  EXPECT_EQ(kill_on_bad_exit(options), true);
  apply_option(options, index_of("ddp-keep-going"), nullptr);
  EXPECT_TRUE(options.keep_going);
  EXPECT_EQ(kill_on_bad_exit(options), false);
  apply_option(options, index_of("ddp"), "off");
  EXPECT_FALSE(kill_on_bad_exit(options));
}

// A step whose ranks recover in place goes on when one fails: srun must not end it, and the tasks learn the mode.
TEST(Options, ARecoveringStepIsNotEndedByAFailedTask) {
  Options options;
  apply_option(options, index_of("ddp"), nullptr);
  apply_option(options, index_of("ddp-recover"), nullptr);
  EXPECT_TRUE(options.recover);
  EXPECT_EQ(kill_on_bad_exit(options), false);
}

TEST(Options, CleanEnvNamesTheRuntimesPrefix) {
  Options options;
  EXPECT_FALSE(options.cleanenv.has_value()) << "unset: the admin's cleanenv applies";
  apply_option(options, index_of("ddp-cleanenv"), "apptainer");
  EXPECT_EQ(options.cleanenv, CleanEnv::Apptainer);
  EXPECT_STREQ(env_prefix(*options.cleanenv), "APPTAINERENV_");
  apply_option(options, index_of("ddp-cleanenv"), "singularity");
  EXPECT_STREQ(env_prefix(*options.cleanenv), "SINGULARITYENV_");
  apply_option(options, index_of("ddp-cleanenv"), "off");
  EXPECT_EQ(options.cleanenv, CleanEnv::Off);
  EXPECT_EQ(error_of([&] { apply_option(options, index_of("ddp-cleanenv"), "docker"); }),
            "unknown --ddp-cleanenv value 'docker'; use apptainer (APPTAINERENV_ names), singularity "
            "(SINGULARITYENV_ names) or off");
  EXPECT_EQ(parse_config({"cleanenv=apptainer"}, "f").cleanenv, CleanEnv::Apptainer);
  EXPECT_EQ(parse_config({}, "f").cleanenv, CleanEnv::Off);
  EXPECT_THROW(parse_config({"cleanenv=yes"}, "f"), Error);
}

TEST(Config, RememberBadNodesIsYesUnlessTheAdminSaysNo) {
  EXPECT_TRUE(parse_config({}, "f").remember_bad_nodes);
  EXPECT_TRUE(parse_config({"remember_bad_nodes=yes"}, "f").remember_bad_nodes);
  EXPECT_FALSE(parse_config({"remember_bad_nodes=no"}, "f").remember_bad_nodes);
  const std::string message = error_of([] { parse_config({"remember_bad_nodes=off"}, "/etc/slurm/plugstack.conf"); });
  EXPECT_NE(message.find("remember_bad_nodes=off"), std::string::npos) << message;
  EXPECT_NE(message.find("yes|no"), std::string::npos) << message;
}

TEST(Options, EveryOptionIsNamedAndDocumented) {
  for (const OptionSpec& spec : option_table()) {
    EXPECT_EQ(std::string(spec.name).rfind("ddp", 0), 0u) << spec.name;
    EXPECT_GT(std::string(spec.usage).size(), 10u) << spec.name;
    EXPECT_EQ(spec.arg == ArgKind::None, spec.arg_info == nullptr) << spec.name;
  }
}

TEST(Config, ParsesAdminDefaults) {
  const Config config = parse_config({"port_range=21000-21999", "default_backend=gloo"}, "/etc/slurm/plugstack.conf");
  EXPECT_EQ(config.port_range.first, 21000);
  EXPECT_EQ(config.port_range.last, 21999);
  EXPECT_EQ(config.default_backend, Backend::Gloo);
  const Config binding = parse_config({"bind=none", "nic=ens5", "topology_xml=/etc/slurm/p4d.xml"}, "f");
  EXPECT_EQ(binding.bind, BindMode::None);
  EXPECT_EQ(binding.nic, "ens5");
  EXPECT_EQ(binding.topology_xml, "/etc/slurm/p4d.xml");
  EXPECT_EQ(parse_config({"nic=auto"}, "f").nic, "");
  const Config defaults = parse_config({}, "x");
  EXPECT_EQ(defaults.port_range.text(), "20000-29999");
  EXPECT_EQ(defaults.default_backend, Backend::Auto);
  EXPECT_EQ(defaults.snapshot_dir_timeout, std::chrono::seconds(30));
  EXPECT_EQ(parse_config({"snapshot_dir_timeout=5"}, "f").snapshot_dir_timeout, std::chrono::seconds(5));
  EXPECT_THROW(parse_config({"snapshot_dir_timeout=0"}, "f"), Error);
}

TEST(Config, RejectsBadArgumentsNamingKeyValueAndFile) {
  const std::string file = "/etc/slurm/plugstack.conf.d/ddp.conf";
  // Every key of the table, in its order: a key added to the table is named without touching this test.
  std::string known;
  for (const ConfigKey& key : config_key_table()) known += (known.empty() ? "" : ", ") + std::string(key.name);
  EXPECT_EQ(known.rfind("port_range, default_backend, snapshot_dir, ", 0), 0u) << known;
  EXPECT_EQ(error_of([&] { parse_config({"prot_range=1-2"}, file); }),
            "plugstack argument 'prot_range=1-2' in " + file + ": unknown key 'prot_range'; known keys: " + known);
  EXPECT_EQ(error_of([&] { parse_config({"verbose"}, file); }),
            "plugstack argument 'verbose' in " + file + " is not key=value; known keys: " + known);
  for (const char* bad :
       {"port_range=30000", "port_range=3-2", "port_range=100-200", "port_range=20000-70000",
        "port_range=", "default_backend=tcp", "default_backend=", "bind=all", "nic=a b", "topology_xml=p4d.xml"}) {
    const std::string message = error_of([&] { parse_config({bad}, file); });
    EXPECT_NE(message.find("plugstack argument '" + std::string(bad) + "' in " + file + ": bad value"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ddp
