// Checks of what the examples compute, against independent references (run by ctest):
// - the finite-difference solver against the closed-form heat-equation solution
//   u(x, t) = exp(-nu k^2 t) sin(k x) (the solver with c = 0), and Burgers' shock-free decay of
//   the mean (it conserves the integral of u);
// - the MLP's backward pass against central finite differences of its loss, for both losses;
// - the checkpoint's curve text: written and read back bit for bit, and a line that is not
//   exactly five whole fields refused (not read in part); a curve longer than one metadata
//   string cut into parts and joined back exactly, through a checkpoint file.
#include "koptim_example.hpp"

#include <koptim_config.hpp>  // KOPTIM_ENABLE_HDF5

namespace {

using namespace koptim_example;

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

void check_heat() {
  for (int k : {1, 3}) {
    Burgers eq;
    eq.c        = 0.0;
    eq.nu       = 0.1;
    eq.t_end    = 1.0;
    const int m = 128;
    Kokkos::View<double**, Kokkos::LayoutRight> u("u", 2, m);
    auto h = Kokkos::create_mirror_view(u);
    for (int j = 0; j < m; ++j) h(0, j) = h(1, j) = std::sin(k * 2.0 * M_PI * j / m);
    Kokkos::deep_copy(u, h);
    solve_burgers(eq, u, 1.0);
    Kokkos::deep_copy(h, u);
    double err = 0, norm = 0;
    for (int j = 0; j < m; ++j) {
      const double exact = std::exp(-eq.nu * k * k * eq.t_end) * std::sin(k * 2.0 * M_PI * j / m);
      err += (h(0, j) - exact) * (h(0, j) - exact);
      norm += exact * exact;
    }
    // Central differences damp sin(kx) at the rate nu (2 - 2 cos(k dx)) / dx^2 = nu k^2 (1 - k^2 dx^2 / 12 + ...),
    // so the relative error is about nu k^4 dx^2 t / 12 (time stepping adds far less): the error
    // must be that leading term, which also shows the second order.
    const double rel  = std::sqrt(err / norm);
    const double dx   = 2.0 * M_PI / m;
    const double lead = eq.nu * std::pow(k, 4) * dx * dx * eq.t_end / 12.0;
    char what[200];
    std::snprintf(what, sizeof what,
                  "heat equation, sin(%dx), 128 points: relative L2 error %.3e against the closed form, "
                  "%.3e predicted by the truncation error",
                  k, rel, lead);
    expect(std::abs(rel / lead - 1.0) < 0.05, what);
  }
  // Burgers conserves the mean of u (periodic, conservative flux).
  std::vector<float> x, y;
  burgers_samples(Burgers(), 4, 3, x, y);
  double worst = 0;
  for (int i = 0; i < 4; ++i) {
    double mx = 0, my = 0;
    for (int j = 0; j < 64; ++j) {
      mx += x[i * 64 + j];
      my += y[i * 64 + j];
    }
    worst = std::max(worst, std::abs(mx - my) / 64);
  }
  expect(worst < 1e-5, "Burgers conserves the mean of u (largest change " + std::to_string(worst) + ")");
}

// Loss of the model on fixed rows, in double.
double loss_of(Mlp& model, Mlp::Workspace& ws, LossKind kind, const Matrix& y) {
  return loss_rows(kind, model.forward(ws), y, Matrix(), 0.0) / y.extent(0);
}

void check_gradient(LossKind kind) {
  const int rows = 8, out = kind == LossKind::cross_entropy ? 5 : 4;
  Mlp model({6, 7, 5, out}, 11);
  Random rng(5);
  auto ws = model.workspace(rows);
  Matrix y("y", rows, out);
  auto hx = Kokkos::create_mirror_view(ws.a[0]);
  auto hy = Kokkos::create_mirror_view(y);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < 6; ++j) hx(i, j) = static_cast<Scalar>(rng.normal());
    for (int j = 0; j < out; ++j)
      hy(i, j) = kind == LossKind::cross_entropy ? (j == i % out ? 1.0f : 0.0f) : static_cast<Scalar>(rng.normal());
  }
  Kokkos::deep_copy(ws.a[0], hx);
  Kokkos::deep_copy(y, hy);
  // Gradient of the mean loss, in two chunks of 4 rows accumulated as the trainer does.
  auto half = model.workspace(rows / 2);
  for (int c = 0; c < 2; ++c) {
    Kokkos::deep_copy(half.a[0], Kokkos::subview(ws.a[0], std::make_pair(4 * c, 4 * c + 4), Kokkos::ALL()));
    Matrix yc("yc", rows / 2, out);
    Kokkos::deep_copy(yc, Kokkos::subview(y, std::make_pair(4 * c, 4 * c + 4), Kokkos::ALL()));
    loss_rows(kind, model.forward(half), yc, half.dz.back(), 1.0 / rows);
    model.backward(half, c > 0);
  }
  // Every parameter entry against a central difference of the loss (float parameters: h = 1e-2
  // balances truncation, about h^2, against rounding, about 1e-7 / h).
  double worst = 0;
  int checked  = 0;
  auto check   = [&](auto param, auto grad) {
    auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), param);
    auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
    for (std::size_t i = 0; i < hp.size(); ++i) {
      const Scalar saved = hp.data()[i];
      const double h     = 1e-2;
      hp.data()[i]       = saved + static_cast<Scalar>(h);
      Kokkos::deep_copy(param, hp);
      const double plus = loss_of(model, ws, kind, y);
      hp.data()[i]      = saved - static_cast<Scalar>(h);
      Kokkos::deep_copy(param, hp);
      const double minus = loss_of(model, ws, kind, y);
      hp.data()[i]       = saved;
      Kokkos::deep_copy(param, hp);
      const double fd = (plus - minus) / (2 * h);
      worst           = std::max(worst, std::abs(fd - hg.data()[i]) / (std::abs(fd) + 1e-2));
      ++checked;
    }
  };
  for (int l = 0; l < model.layers(); ++l) {
    check(model.W[l], model.dW[l]);
    check(model.b[l], model.db[l]);
  }
  char what[200];
  std::snprintf(what, sizeof what, "MLP gradient (%s) against central differences: %d entries, largest error %.2e",
                kind == LossKind::cross_entropy ? "cross-entropy" : "mean squared", checked, worst);
  expect(worst < 1e-2, what);
}

void check_curve_text() {
  std::vector<EvalPoint> curve(3);
  const double tiny         = 4.9406564584124654e-324;  // a subnormal: strtod may set ERANGE, still exact
  const double values[3][4] = {
      {0.0, 2.302585092994046, 2.3, 0.1}, {1.0 / 3.0, tiny, -0.0, 1e300}, {7.25, std::nan(""), INFINITY, 0.5}};
  for (int i = 0; i < 3; ++i) {
    curve[i].step        = 10 * i + (i == 2 ? 9223372036854775807LL - 20 : 0);
    curve[i].wall_s      = values[i][0];
    curve[i].train_loss  = values[i][1];
    curve[i].test_loss   = values[i][2];
    curve[i].test_metric = values[i][3];
  }
  const auto back = parse_curve(curve_text(curve));
  bool same       = back.size() == curve.size();
  for (std::size_t i = 0; same && i < curve.size(); ++i) {
    const double a[] = {curve[i].wall_s, curve[i].train_loss, curve[i].test_loss, curve[i].test_metric};
    const double b[] = {back[i].wall_s, back[i].train_loss, back[i].test_loss, back[i].test_metric};
    same             = back[i].step == curve[i].step && std::memcmp(a, b, sizeof a) == 0;
  }
  expect(same, "the curve text reads back bit for bit (subnormal, -0, nan, inf, a step near 2^63)");
  for (const char* bad : {"1.5 0x1p+0 0x1p+0 0x1p+0 0x1p+0",                      // a step that is not an integer
                          "1 0x1p+0 0x1p+0 0x1p+0 0x1p+0 junk",                   // a sixth field
                          "1 0x1p+0 0x1p+0 0x1p+0",                               // four fields
                          "1 0x1p+0 0x1p+0 0x1p+0 0x1p+0x",                       // a field read in part
                          "1  0x1p+0 0x1p+0 0x1p+0 0x1p+0",                       // an empty field
                          "1 \t0x1p+0 0x1p+0 0x1p+0 0x1p+0",                      // leading white space
                          "99999999999999999999 0x1p+0 0x1p+0 0x1p+0 0x1p+0"}) {  // beyond long long
    bool refused = false;
    try {
      parse_curve(bad);
    } catch (const UsageError&) {
      refused = true;
    }
    expect(refused, std::string("the curve line '") + bad + "' is refused");
  }
}

// A curve longer than one metadata string holds (10,000 evaluations, about 870 KB): cut into
// parts of at most 65000 bytes at line ends, joined back exactly, through a real checkpoint where
// koptim has HDF5; parts with a gap or a stray name are refused.
void check_long_curve() {
  std::vector<EvalPoint> curve(10000);
  for (std::size_t i = 0; i < curve.size(); ++i) {
    curve[i].step        = static_cast<std::int64_t>(10 * i);
    curve[i].wall_s      = 0.001 * static_cast<double>(i) / 3.0;
    curve[i].train_loss  = 2.3 / (1.0 + static_cast<double>(i) / 7.0);
    curve[i].test_loss   = 2.4 / (1.0 + static_cast<double>(i) / 11.0);
    curve[i].test_metric = 1.0 - 1.0 / (2.0 + static_cast<double>(i));
  }
  const std::string text = curve_text(curve);
  koptim::io::Metadata m;
  curve_to_metadata(text, m);
  bool parts_ok = m.strings.size() > 1;
  for (const auto& kv : m.strings)
    parts_ok = parts_ok && kv.second.size() <= curve_part_bytes && !kv.second.empty() && kv.second.back() == '\n';
  expect(parts_ok, "a curve of " + std::to_string(text.size()) + " bytes goes into " +
                       std::to_string(m.strings.size()) +
                       " metadata strings of at most 65000 bytes, each cut at a line end");
  expect(curve_from_metadata(m, "x") == text, "the parts join back into the curve's text exactly");
  koptim::io::Metadata one;
  curve_to_metadata("", one);
  expect(one.strings.size() == 1 && one.strings.at("curve").empty(), "an empty curve is one empty string");
  auto refused = [](const koptim::io::Metadata& bad) {
    try {
      curve_from_metadata(bad, "x");
    } catch (const UsageError&) {
      return true;
    }
    return false;
  };
  auto gap = m;
  gap.strings.erase("curve.2");
  expect(refused(gap), "a curve whose part 'curve.2' is missing is refused");
  auto stray               = m;
  stray.strings["curve.x"] = "";
  expect(refused(stray), "a stray metadata string 'curve.x' is refused");
  auto first = m;
  first.strings.erase("curve");
  expect(refused(first), "parts without 'curve' are refused");
#if KOPTIM_ENABLE_HDF5
  // Through a file: a one-parameter AdamW saved with these metadata, read back.
  Kokkos::View<float*> w("w", 1), g("g", 1);
  koptim::ParameterSet ps;
  ps.add("w", w, g);
  Teuchos::ParameterList l;
  l.set("optimizer", std::string("AdamW"));
  auto opt               = koptim::create(ps, l);
  const std::string path = "koptim_example_checks_long_curve.h5";
  koptim::io::SaveOptions o;
  o.metadata = m;
  koptim::io::save_checkpoint(path, *opt, o);
  const auto back = koptim::io::read_checkpoint_metadata(path);
  std::remove(path.c_str());
  expect(curve_from_metadata(back, path) == text, "the long curve comes back exactly through a checkpoint file");
#else
  std::printf("skipped: the long curve through a checkpoint file (koptim built without HDF5)\n");
#endif
}

// An option's empty value (an unset shell variable in --restart "$DIR") is refused: the options
// read "" as "not given", so the run started over without a word.
void check_empty_values() {
  for (const char* option : {"--restart", "--csv", "--config", "--checkpoint"}) {
    std::string program = "prog", flag = option, empty;
    char* argv[] = {&program[0], &flag[0], &empty[0], nullptr};
    Arguments args(3, argv);
    bool refused = false;
    args.next();
    try {
      args.value();
    } catch (const UsageError& e) {
      refused = std::string(e.what()).find("got an empty one") != std::string::npos;
    }
    expect(refused, std::string(option) + " \"\" is refused");
  }
}

}  // namespace

int main(int argc, char** argv) {
  return example_main(argc, argv, [](int n, char** args) {
    if (n > 1) throw UsageError(std::string("takes no arguments (got '") + args[1] + "')");
    check_heat();
    check_gradient(LossKind::cross_entropy);
    check_gradient(LossKind::mean_squared);
    check_curve_text();
    check_long_curve();
    check_empty_values();
    if (failures) throw std::runtime_error(std::to_string(failures) + " check(s) failed");
  });
}
