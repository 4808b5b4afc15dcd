// One table per option enum: its values and the names a parameter list uses for them. The
// enum's to_string, the factory's reading of a list and the validator's list of choices (and so
// docs/parameters.md) all come from it.
#ifndef KOPTIM_SRC_CONFIG_ENUMNAMES_HPP
#define KOPTIM_SRC_CONFIG_ENUMNAMES_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/gefen/koptim_Gefen.hpp>
#include <koptim/linalg/koptim_RootOptions.hpp>
#include <koptim/shampoo/koptim_Shampoo.hpp>

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace koptim {
namespace Impl {

template <class E>
struct EnumNames;

template <class E, std::size_t N>
using NameTable = std::array<std::pair<E, const char*>, N>;

template <>
struct EnumNames<NonFiniteGradient> {
  static constexpr NameTable<NonFiniteGradient, 3> table{{{NonFiniteGradient::error, "error"},
                                                          {NonFiniteGradient::skip_step, "skip_step"},
                                                          {NonFiniteGradient::unchecked, "unchecked"}}};
};
template <>
struct EnumNames<WeightDecayType> {
  static constexpr NameTable<WeightDecayType, 4> table{{{WeightDecayType::L2, "L2"},
                                                        {WeightDecayType::decoupled, "decoupled"},
                                                        {WeightDecayType::corrected, "corrected"},
                                                        {WeightDecayType::independent, "independent"}}};
};
template <>
struct EnumNames<Grafting> {
  static constexpr NameTable<Grafting, 5> table{{{Grafting::none, "none"},
                                                 {Grafting::SGD, "SGD"},
                                                 {Grafting::AdaGrad, "AdaGrad"},
                                                 {Grafting::RMSProp, "RMSProp"},
                                                 {Grafting::Adam, "Adam"}}};
};
template <>
struct EnumNames<CommunicationDType> {
  static constexpr NameTable<CommunicationDType, 2> table{
      {{CommunicationDType::float32, "float32"}, {CommunicationDType::bfloat16, "bfloat16"}}};
};
template <>
struct EnumNames<DistributedCostModel> {
  static constexpr NameTable<DistributedCostModel, 2> table{
      {{DistributedCostModel::bytes, "bytes"}, {DistributedCostModel::cubic, "cubic"}}};
};
template <>
struct EnumNames<Eigenbasis> {
  static constexpr NameTable<Eigenbasis, 2> table{{{Eigenbasis::eigh, "eigh"}, {Eigenbasis::qr, "qr"}}};
};
template <>
struct EnumNames<linalg::RootMethod> {
  static constexpr NameTable<linalg::RootMethod, 2> table{
      {{linalg::RootMethod::eigen, "eigen"}, {linalg::RootMethod::coupled_newton, "coupled_newton"}}};
};
template <>
struct EnumNames<linalg::EighSolver> {
  static constexpr NameTable<linalg::EighSolver, 3> table{{{linalg::EighSolver::automatic, "automatic"},
                                                           {linalg::EighSolver::lapack, "lapack"},
                                                           {linalg::EighSolver::jacobi, "jacobi"}}};
};
template <>
struct EnumNames<GefenPartitionRule> {
  static constexpr NameTable<GefenPartitionRule, 2> table{
      {{GefenPartitionRule::neighbour_contrast, "neighbour_contrast"},
       {GefenPartitionRule::variance_drop, "variance_drop"}}};
};
template <>
struct EnumNames<GefenP1SecondMoment> {
  static constexpr NameTable<GefenP1SecondMoment, 2> table{
      {{GefenP1SecondMoment::factored, "factored"}, {GefenP1SecondMoment::full, "full"}}};
};
template <>
struct EnumNames<GefenSecondMoment> {
  static constexpr NameTable<GefenSecondMoment, 4> table{{{GefenSecondMoment::uninitialised, "uninitialised"},
                                                          {GefenSecondMoment::shared, "shared"},
                                                          {GefenSecondMoment::factored, "factored"},
                                                          {GefenSecondMoment::full, "full"}}};
};

// The name of e ("" for a value outside the table, which a valid enum never is).
template <class E>
const char* enum_name(E e) {
  for (const auto& entry : EnumNames<E>::table)
    if (entry.first == e) return entry.second;
  return "";
}

// Every name, in the table's order (the first is not necessarily the default).
template <class E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& entry : EnumNames<E>::table) out.emplace_back(entry.second);
  return out;
}

// The value named name; ConfigError naming the key, the value and the choices otherwise.
template <class E>
E enum_value(const std::string& key, const std::string& name) {
  for (const auto& entry : EnumNames<E>::table)
    if (name == entry.second) return entry.first;
  std::string choices;
  for (const auto& entry : EnumNames<E>::table) choices += (choices.empty() ? "" : ", ") + std::string(entry.second);
  throw ConfigError("koptim: key '" + key + "' = \"" + name + "\" is not one of: " + choices);
}

}  // namespace Impl
}  // namespace koptim

#endif
