//===- Options.cpp - mdl-convert's command line ---------------------------===//

#include "Options.h"
#include "Processes.h"

#include "mdl/Runtime/Convert/CheckpointFiles.h"
#include "mdl/Runtime/Convert/Progress.h"

#include <array>
#include <cstdio>
#include <cstdlib>

using namespace mdl;
using namespace mdl::rt;
using mdl::convert::Options;

namespace {

const char *const kUsage =
    R"(usage: mdl-convert [--model NAME] --from A --to B [options] IN_DIR OUT_DIR
       mdl-convert --list

Converts a checkpoint from layout A to layout B (hf, mcore-te, mcore-local,
vllm, ...); A and B may be one layout (a Megatron checkpoint to another
parallel configuration, an HF checkpoint into other shards). The model is the one whose spec serves config.json's
architectures and model_type, or NAME. IN_DIR holds config.json and, for
hf, the safetensors files (with model.safetensors.index.json when
sharded); for a backend, what mdl-convert wrote (plan.json, config.json,
the ranks' files), or a checkpoint a training run saved (mcore: the
directory with latest_checkpointed_iteration.txt, a release/ or iter_*
directory, or one rank's directory; its configuration is found from its
rank directories, the model's config comes from --config). OUT_DIR gets
config.json, plan.json, the source's other files that are not weights
(tokenizer, generation config, ...) and the target's files: for hf
model.safetensors, or shards with model.safetensors.index.json above
--max-shard-size; for mcore Megatron's torch checkpoint
(latest_checkpointed_iteration.txt, and in release/ one
mp_rank_TT[_PPP][_EEE] directory per saved rank with a model_optim_rng.pt);
for vllm its sharded_state files, model-rank-R-part-P.safetensors.

Options:
  --tp N --pp N --ep N --etp N --cp N --dp N --vpp N --sp
                      the target's parallel configuration (a backend
                      source's comes from its plan.json)
  --first-stage-layers N, --last-stage-layers N
                      uneven first and last pipeline stages
  --rank R            convert only rank R of the target, reading only the
                      source files it needs (ranks convert in parallel)
  --set KEY=VALUE     override a key of config.json (e.g.
                      --set mtp_num_hidden_layers=0: the tensors of the
                      dropped MTP layers are skipped); never more stack
                      elements than the checkpoint holds
  --choice NAME=VALUE a storage variant (e.g. expert_storage=packed); by
                      default detected from an HF source, as are config
                      values its config leaves open (an MTP depth); or a
                      serving option (vLLM's lora=off|on, the modules it
                      builds with LoRA enabled; --adapters selects lora=on)
  --adapters          convert LoRA adapters instead of weights: IN_DIR
                      holds HF-PEFT's adapter_model.safetensors (for hf)
                      or what mdl-convert --adapters wrote; OUT_DIR gets
                      the same, one adapter_model.safetensors per rank for
                      a backend. Fused modules (linear_qkv, linear_fc1) get
                      their sources' adapters stacked along the rank, and
                      the HF modules of a fused adapter share its lora_A,
                      so every merged delta W is kept exactly
  --adapter-names A,B the adapters' factor names in a backend's files
                      (default lora_A,lora_B; Megatron-Bridge's:
                      adapter.linear_in,adapter.linear_out)
  --config FILE       the model's config.json (default:
                      IN_DIR/config.json; required for a checkpoint
                      without plan.json)
  --format safetensors
                      write a backend's ranks as model.safetensors in one
                      directory per rank at the top of OUT_DIR, rather
                      than in the backend's own format (--format native);
                      a backend that keeps its ranks' files at the top
                      (vllm) writes those, which are safetensors already
  --format torch_dist write Megatron-Core's distributed checkpoint (with
                      the layout of backend B_dist for --to B: mcore-te's
                      is mcore_te_dist); --from B reads one as such
  --iteration N       save as iteration N (iter_000000N) rather than as a
                      release
  --max-shard-size S  the largest file of an hf target or a split rank
                      (vllm), as save_pretrained reads it: 5GB (the
                      default, 10^9 bytes a GB), 500MB, 20KB, 2GiB, bytes
  --dtype T           bf16, fp16 or fp32: floating weights are converted
                      to T (rounded once, to nearest even), parameters the
                      spec gives a dtype of their own keep it; the output
                      config.json's torch_dtype says T
  --overwrite         write into OUT_DIR although it is not empty (files of
                      the same names are replaced, others left as they
                      are); without it, an OUT_DIR that holds anything is
                      refused, and a process of --rank or --ranks-from-env
                      (which share OUT_DIR) refuses a file of its share
                      that exists
  --replace-copies    accept that a tensor of the source the layout has as
                      a copy of another (an MTP layer's embed_tokens or
                      shared_head.head in an HF checkpoint) but that
                      differs from it is replaced by that other where the
                      target holds no such copy (a target of the same
                      backend keeps it); without it, such a source is
                      refused, naming both tensors
  --dry-run           check the source as the conversion does, then print
                      what each target rank would hold (directory, name,
                      shape, dtype) and write nothing
  --ranks-from-env    convert this process's share of the target's files,
                      from torchrun's RANK and WORLD_SIZE or SLURM's
                      SLURM_PROCID and SLURM_NTASKS (as --rank does, each
                      process on its own). Under mpirun or srun, with MDL
                      built with MPI, the files are shared out without it
                      and the processes agree: any failure fails all, and
                      the output is committed once all succeeded
  --threads N         worker threads (default: the CPUs this process may
                      use, after its affinity mask and cgroup CPU quota)
  --io=MODE           how tensor data goes to the disk: direct (the
                      default) with direct I/O, around the page cache,
                      where the file system allows (else buffered);
                      buffered through the page cache, runs of bytes
                      already in a file copied in the kernel
  --progress=MODE     tty: one line redrawn with the rate and the time
                      left; log: a line every few seconds; json: one JSON
                      object per line (events progress, done, failed);
                      none; auto (the default): tty on a terminal, log
                      elsewhere. tty and log end with a summary (bytes,
                      tensors, ranks, time, throughput, threads)
  --progress-interval S
                      seconds between log and json lines (default 5)
  --quiet             no progress (--progress=none) and no warnings
  --list              the compiled-in models and backends
  --version           the version of MDL (", with MPI" when built with it)
)";

} // namespace

using Result = std::optional<std::string>;

cli::Parsed convert::parseCommandLine(int argc, char **argv, Options &o) {
  // Model and backend names in either spelling and any case.
  auto name = [](std::string flag, std::string &out) {
    return cli::nonEmptyOption(flag, "a name", [&out](const std::string &v) {
      out = cli::normalizeBackendName(v);
    });
  };
  std::vector<cli::Option> table = {
      cli::exitOption({"--help", "-h"}, [] { std::fputs(kUsage, stdout); }),
      cli::exitOption({"--version"},
                      [] {
                        // Whether it can spread a conversion over an MPI job.
                        std::printf("%s%s\n",
                                    cli::versionLine("mdl-convert").c_str(),
                                    Processes::haveMPI() ? ", with MPI" : "");
                      }),
      name("--model", o.model),
      name("--from", o.fromName),
      name("--to", o.toName),
      cli::keyValueOption("--set",
                          [&](std::string k, std::string v) {
                            o.load.overrides.push_back({k, v});
                          }),
      cli::keyValueOption(
          "--choice",
          [&](std::string k, std::string v) { o.choicesGiven[k] = v; }),
      cli::flag({"--adapters"}, o.adapters),
      cli::valueOption(
          {"--adapter-names"},
          [&](const std::string &v) -> Result {
            size_t comma = v.find(',');
            if (comma == std::string::npos || comma == 0 ||
                comma + 1 == v.size() ||
                v.substr(0, comma) == v.substr(comma + 1))
              return "--adapter-names takes two names, A,B";
            o.namesGiven = FactorNames{v.substr(0, comma), v.substr(comma + 1)};
            return std::nullopt;
          }),
      cli::nonEmptyOption("--config", "a file",
                          [&](const std::string &v) { o.configGiven = v; }),
      cli::choiceOption("--format", {"safetensors", "native", "torch_dist"},
                        [&](size_t i) {
                          o.safetensorsOut = i == 0;
                          o.distOut = i == 2;
                        }),
      cli::valueOption({"--iteration"},
                       [&](const std::string &v) -> Result {
                         if (v.empty())
                           return "--iteration needs a number";
                         char *end = nullptr;
                         long long n = std::strtoll(v.c_str(), &end, 10);
                         if (n < 0 || *end || n > 9999999)
                           return "--iteration takes an iteration number (0 "
                                  "to 9999999)";
                         o.iteration = n;
                         return std::nullopt;
                       }),
      cli::valueOption({"--max-shard-size"},
                       [&](const std::string &v) -> Result {
                         std::optional<uint64_t> n = parseByteSize(v);
                         if (!n || *n == 0)
                           return "--max-shard-size takes a size such as 5GB, "
                                  "500MB, 20KB or a number of bytes";
                         o.maxShard = *n;
                         return std::nullopt;
                       }),
      cli::choiceOption("--dtype", {"bf16", "fp16", "fp32"},
                        [&](size_t i) {
                          o.castTo = std::array{DType::BF16, DType::F16,
                                                DType::F32}[i];
                        }),
      cli::flag({"--dry-run"}, o.dryRun),
      cli::flag({"--overwrite"}, o.overwrite),
      cli::flag({"--replace-copies"}, o.replaceCopies),
      cli::choiceOption("--io", {"direct", "buffered"},
                        [&](size_t i) { o.directIO = i == 0; }),
      // Read by main(), which starts the processes.
      cli::flag({"--ranks-from-env"}, [] {}),
      cli::integerOption("--threads", 1, kMaxAxisSize,
                         [&](int64_t n) { o.threads = n; }),
      cli::valueOption({"--progress"},
                       [&](const std::string &v) -> Result {
                         if (!parseProgressMode(v, false))
                           return "--progress takes tty, log, json, none or "
                                  "auto";
                         o.progressName = v;
                         return std::nullopt;
                       }),
      cli::valueOption(
          {"--progress-interval"},
          [&](const std::string &v) -> Result {
            char *end = nullptr;
            if (v.empty() ||
                !((o.progressInterval = std::strtod(v.c_str(), &end)) >= 0) ||
                *end)
              return "--progress-interval takes a number of seconds";
            return std::nullopt;
          }),
      cli::flag({"--quiet"}, o.quiet),
      cli::flag({"--list"}, o.list),
  };
  for (cli::Option &p :
       cli::parallelOptions(o.target, o.parallelGiven, o.onlyRank))
    table.push_back(std::move(p));
  cli::Args args(std::vector<std::string>(argv + 1, argv + argc));
  return cli::parseArgs(args, table, [&](const std::string &a) -> Result {
    o.positional.push_back(a);
    return std::nullopt;
  });
}
