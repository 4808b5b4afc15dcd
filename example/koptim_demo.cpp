// koptim's demo: trains the two example models, the UCI digits classifier and the Burgers
// solution operator, with AdamW, Shampoo and Gefen (each configured by its file in configs/),
// showing a progress line per run; then prints a table per task (final losses, the test metric,
// the steps and wall time each optimizer needs to reach AdamW's final training loss, ms per step,
// optimizer state per parameter) and writes the curves as CSV and a PNG plot per task (gnuplot).
//
//   koptim_demo                          both tasks, the three optimizers, files into .
//   koptim_demo --output results         files into results/
//   koptim_demo --task digits --steps 200
//   koptim_demo --config my.yaml         one optimizer from a file (.yaml, .yml or .xml) on each task
//   koptim_demo --checkpoint-every 100   checkpoints of every run; after an interruption,
//   koptim_demo --restart .              continues each run where its checkpoint left it
//   koptim_demo --print-parameters       the reference of every parameter-list key (Markdown)
#include "koptim_example.hpp"

#include <filesystem>
#include <map>

namespace {

using namespace koptim_example;

const char* const usage =
    "usage: koptim_demo [options]\n"
    "  --task NAME          digits, burgers or all (default: all)\n"
    "  --steps N            optimizer steps of every run (default: each task's; sets the schedules' total_steps, "
    "scales warmup)\n"
    "  --config FILE        train with this parameter list instead of the three default files (repeatable, one\n"
    "                       file per optimizer)\n"
    "  --seed N             seed of the initialization and the batches (default 1)\n"
    "  --output DIR         where the CSV curves and the plots go (default: the current directory)\n"
    "  --checkpoint-every N saves each run every N steps to <output>/<task>_<optimizer>.h5\n"
    "  --restart DIR        continues each run from DIR/<task>_<optimizer>.h5 where that file exists (same\n"
    "                       configuration, --steps and --seed)\n"
    "  --quiet              no progress lines\n"
    "  --print-parameters   prints the reference of every parameter-list key (Markdown) and exits\n"
    "  --version            prints koptim's version and the git commit it was built from, and exits\n"
    "  --help               this text";

struct Task {
  std::string name, metric, metric_title;
  std::vector<int> layers;
  int steps = 0, batch = 0, eval_every = 0;
};

struct Run {
  std::string optimizer, file;
  std::vector<EvalPoint> curve;
  double ms_per_step = 0, bytes_per_parameter = 0;
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A run's files are named after its task and optimizer: <task>_<optimizer><ext>.
std::string run_file(const std::string& task, const std::string& optimizer, const char* ext) {
  return task + "_" + lower(optimizer) + ext;
}

// The first evaluation at which the training loss is at most target: {step, wall seconds}, or
// {-1, 0} when the run never gets there.
std::pair<std::int64_t, double> first_reaching(const Run& r, double target) {
  for (const auto& e : r.curve)
    if (e.train_loss <= target) return {e.step, e.wall_s};
  return {-1, 0.0};
}

void print_table(const Task& task, const std::vector<Run>& runs, std::int64_t parameters) {
  const double target          = runs.front().curve.back().train_loss;
  const std::int64_t ref_steps = first_reaching(runs.front(), target).first;
  std::printf(
      "\n%s: MLP %s, %lld parameters, batch %d, %d steps; steps and time to reach %s's final training loss "
      "%.4e\n\n",
      task.name.c_str(), Mlp(task.layers, 0).shape().c_str(), static_cast<long long>(parameters), task.batch,
      task.steps, runs.front().optimizer.c_str(), target);
  std::printf(
      "| optimizer | train loss | test loss | %s | steps to %s's loss | time to %s's loss | ms/step | state "
      "bytes/param |\n|---|---|---|---|---|---|---|---|\n",
      task.metric_title.c_str(), runs.front().optimizer.c_str(), runs.front().optimizer.c_str());
  for (const auto& r : runs) {
    const EvalPoint& e = r.curve.back();
    const auto reach   = first_reaching(r, target);
    char metric[32], steps[48], time[32];
    if (task.metric == "accuracy")
      std::snprintf(metric, sizeof metric, "%.2f%%", 100.0 * e.test_metric);
    else
      std::snprintf(metric, sizeof metric, "%.4f", e.test_metric);
    if (reach.first < 0) {
      std::snprintf(steps, sizeof steps, "not reached");
      std::snprintf(time, sizeof time, "-");
    } else {
      if (ref_steps > 0)
        std::snprintf(steps, sizeof steps, "%lld (%.2fx)", static_cast<long long>(reach.first),
                      static_cast<double>(reach.first) / static_cast<double>(ref_steps));
      else  // the reference never went below its starting loss
        std::snprintf(steps, sizeof steps, "%lld", static_cast<long long>(reach.first));
      std::snprintf(time, sizeof time, "%.2f s", reach.second);
    }
    std::printf("| %s | %.4e | %.4e | %s | %s | %s | %.2f | %.2f |\n", r.optimizer.c_str(), e.train_loss, e.test_loss,
                metric, steps, time, r.ms_per_step, r.bytes_per_parameter);
  }
  std::fflush(stdout);
}

// Writes <task>.gp and runs gnuplot on it in dir; false when gnuplot is missing or fails.
bool plot(const Task& task, const std::vector<Run>& runs, const std::filesystem::path& dir) {
  const std::string script = task.name + ".gp";
  {
    std::ofstream gp(dir / script);
    gp << "# " << task.name
       << ": training loss (full training set) against step and wall time, written by koptim_demo\n"
       << "set datafile separator ','\n"
       << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1100,420 font ',10' } "
          "else { set terminal png size 1100,420 }\n"
       << "set output '" << task.name << ".png'\n"
       << "set multiplot layout 1,2 title '" << task.name << ": training loss on the full training set'\n"
       << "set logscale y\nset format y '%.0e'\nset grid\nset key top right\nset ylabel 'training loss'\n";
    const char* axes[2][2] = {{"1", "step"}, {"2", "wall time (s), evaluations excluded"}};
    for (const auto& axis : axes) {
      gp << "set xlabel '" << axis[1] << "'\nplot ";
      for (std::size_t i = 0; i < runs.size(); ++i)
        gp << (i ? ", \\\n     " : "") << "'" << run_file(task.name, runs[i].optimizer, ".csv") << "' using " << axis[0]
           << ":3 with lines lw 2 title '" << runs[i].optimizer << "'";
      gp << "\n";
    }
    gp << "unset multiplot\n";
  }
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) return false;
  std::string quoted = "'";
  for (char c : dir.string()) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  return std::system(("cd " + quoted + " && gnuplot " + script).c_str()) == 0;
}

void demo(int argc, char** argv) {
  // The demo trains one process's runs and writes their files; under mpiexec every rank would
  // run the same runs and write the same files at once. (koptim_digits and koptim_burgers run
  // data-parallel.)
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks > 1)
    throw UsageError("runs on one process (it has " + std::to_string(ranks) +
                     " ranks); for data-parallel training run koptim_digits or koptim_burgers under mpiexec");
  std::string task_name = "all", output = ".", restart;
  int checkpoint_every = 0;
  std::vector<std::string> configs;
  int steps          = 0;
  std::uint64_t seed = 1;
  bool progress = true, print = false, version = false, help = false;
  std::string run_option;  // the first option that configures a run
  Arguments args(argc, argv);
  args.allow_repeats("--config");
  while (args.next()) {
    const std::string f = args.flag();
    if (run_option.empty() && f != "--print-parameters" && f != "--version" && f != "--help") run_option = f;
    if (f == "--task") {
      task_name = args.value();
      if (task_name != "digits" && task_name != "burgers" && task_name != "all")
        throw UsageError("--task expects digits, burgers or all, got '" + task_name + "'");
    } else if (f == "--steps") {
      steps = args.integer(1, 100000000);
    } else if (f == "--config") {
      configs.push_back(args.value());
    } else if (f == "--seed") {
      seed = args.integer(0, 1L << 40);
    } else if (f == "--output") {
      output = args.value();
    } else if (f == "--checkpoint-every") {
      checkpoint_every = args.integer(1, 100000000);
    } else if (f == "--restart") {
      restart = args.value();
    } else if (f == "--quiet") {
      progress = false;
    } else if (f == "--print-parameters") {
      print = true;
    } else if (f == "--version") {
      version = true;
    } else if (f == "--help") {
      help = true;
    } else {
      args.unknown(usage);
    }
  }
  // After every argument was read: an unknown one is refused even beside --help.
  if (help) {
    std::printf("%s\n", usage);
    return;
  }
  // Each prints and exits: beside each other or a run's options, something given would be ignored.
  if (print && version) throw UsageError("--print-parameters and --version: give one of them");
  if ((print || version) && !run_option.empty())
    throw UsageError(std::string(print ? "--print-parameters" : "--version") + " runs nothing, and " + run_option +
                     " configures a run: give it alone");
  if (version) {
    std::printf("koptim %s (git %s)\n", koptim::version_string(), koptim::git_hash());
    return;
  }
  if (!restart.empty() && !std::filesystem::is_directory(restart))
    throw UsageError("--restart expects the directory of an earlier --output, and '" + restart +
                     "' is not a directory");
  if (print) {
    koptim::print_parameter_reference(std::cout);
    return;
  }
  const std::filesystem::path dir(output);
  std::filesystem::create_directories(dir);

  const std::string root = KOPTIM_EXAMPLE_DIR;
  std::printf("koptim %s (git %s), Kokkos %d, execution space %s\n", KOPTIM_VERSION_STRING, koptim::git_hash(),
              KOKKOS_VERSION, Kokkos::DefaultExecutionSpace::name());
  std::vector<Task> tasks;
  if (task_name != "burgers") tasks.push_back({"digits", "accuracy", "test accuracy", digits_layers, 1000, 64, 10});
  if (task_name != "digits")
    tasks.push_back({"burgers", "rel_l2_error", "test rel. L2 error", burgers_layers, 1000, 64, 10});

  // Every run is built (and restored from --restart) before any trains: a checkpoint refused for
  // one run (another seed, configuration, a step past --steps) stops the demo before any run has
  // written a file.
  struct Prepared {
    Task task;
    Dataset data;
    std::vector<std::string> files;
    std::vector<std::unique_ptr<Mlp>> models;
    std::vector<std::unique_ptr<Trainer>> trainers;
    std::int64_t parameters = 0;
  };
  std::vector<std::unique_ptr<Prepared>> prepared;
  for (Task& task : tasks) {
    if (steps > 0) task.steps = steps;
    task.eval_every = std::max(1, std::min(task.eval_every, task.steps / 10));
    prepared.push_back(std::make_unique<Prepared>());
    Prepared& pr = *prepared.back();
    pr.task      = task;
    pr.data      = task.name == "digits" ? load_digits(root + "/data/digits.txt") : make_burgers(2048, 512);
    std::printf("\n%s: %s\n", task.name.c_str(), pr.data.description.c_str());
    pr.files = configs;
    if (pr.files.empty())
      for (const char* opt : {"adamw", "shampoo", "gefen"})
        pr.files.push_back(root + "/configs/" + task.name + "_" + opt + ".yaml");
    // One run per optimizer: its files are named after it (two configurations of one optimizer
    // would write the same files, and a restart would give both the same state).
    std::vector<Teuchos::RCP<Teuchos::ParameterList>> lists;
    std::map<std::string, std::string> file_of;
    for (const auto& file : pr.files) {
      lists.push_back(read_config(file, 0.0, task.steps, steps > 0));
      const auto name = lists.back()->get<std::string>("optimizer");
      if (!file_of.emplace(name, file).second)
        throw UsageError("--config '" + file_of[name] + "' and '" + file + "' both configure " + name +
                         "; the demo names a run's files after its optimizer (" + run_file(task.name, name, ".csv") +
                         "): give each optimizer once");
    }
    // --restart DIR continues the runs whose checkpoint is there; a task none of whose runs has
    // one would silently start over: refused.
    if (!restart.empty()) {
      std::string expected;
      bool any = false;
      for (const auto& l : lists) {
        const std::string name = run_file(task.name, l->get<std::string>("optimizer"), ".h5");
        any                    = any || std::filesystem::exists(std::filesystem::path(restart) / name);
        expected += (expected.empty() ? "" : ", ") + name;
      }
      if (!any)
        throw UsageError("--restart '" + restart + "' holds no checkpoint of task " + task.name + " (expected " +
                         expected + ")");
    }
    for (std::size_t k = 0; k < pr.files.size(); ++k) {
      pr.models.push_back(std::make_unique<Mlp>(task.layers, seed));
      pr.parameters = pr.models.back()->num_parameters();
      TrainSettings settings;
      settings.steps      = task.steps;
      settings.batch      = task.batch;
      settings.eval_every = task.eval_every;
      settings.seed       = seed;
      settings.progress   = progress;
      settings.label      = task.name + " " + lists[k]->get<std::string>("optimizer", "?");
      pr.trainers.push_back(std::make_unique<Trainer>(pr.data, *pr.models.back(), *lists[k], settings));
      Trainer& trainer             = *pr.trainers.back();
      const std::string checkpoint = run_file(task.name, trainer.optimizer().name(), ".h5");
      if (!restart.empty() && std::filesystem::exists(std::filesystem::path(restart) / checkpoint)) {
        trainer.restore((std::filesystem::path(restart) / checkpoint).string());
        std::printf("%s: restarted at step %lld\n", settings.label.c_str(),
                    static_cast<long long>(trainer.optimizer().step_count()));
      } else if (!restart.empty()) {
        std::printf("%s: no %s in %s, starts at step 0\n", settings.label.c_str(), checkpoint.c_str(), restart.c_str());
      }
    }
  }

  std::vector<std::string> written;
  for (const auto& pr : prepared) {
    const Task& task = pr->task;
    std::vector<Run> runs;
    for (std::size_t k = 0; k < pr->files.size(); ++k) {
      Trainer& trainer             = *pr->trainers[k];
      const std::string checkpoint = run_file(task.name, trainer.optimizer().name(), ".h5");
      bool saved                   = false;
      trainer.train([&](std::int64_t step) {
        if (checkpoint_every > 0 && step % checkpoint_every == 0) {
          trainer.save((dir / checkpoint).string());
          saved = true;
        }
      });
      if (saved) written.push_back((dir / checkpoint).string());
      Run r;
      r.optimizer           = trainer.optimizer().name();
      r.file                = pr->files[k];
      r.curve               = trainer.curve();
      r.ms_per_step         = trainer.ms_per_step();
      r.bytes_per_parameter = state_bytes_per_parameter(trainer.optimizer());
      const auto csv        = dir / run_file(task.name, r.optimizer, ".csv");
      write_csv(csv.string(), r.curve, task.metric);
      written.push_back(csv.string());
      runs.push_back(std::move(r));
    }
    print_table(task, runs, pr->parameters);
    if (plot(task, runs, dir))
      written.push_back((dir / (task.name + ".png")).string());
    else
      std::printf("(no plot: gnuplot is not installed or failed; %s holds the script)\n",
                  (dir / (task.name + ".gp")).string().c_str());
  }
  std::printf("\nfiles written:");
  for (const auto& f : written) std::printf(" %s", f.c_str());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) { return koptim_example::example_main(argc, argv, demo); }
