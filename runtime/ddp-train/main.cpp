// ddp-train: distributed data-parallel training in C++, launched like a torchrun script (see --help). A program of
// the installed API like any other: train_main with ddp-train's built-in workloads as the job factory.
#include "ddp_runtime/train.hpp"

int main(int argc, char** argv) { return ddp::runtime::train_main(argc, argv, ddp::runtime::make_workload); }
