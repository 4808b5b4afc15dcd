#include "koptim_EnumNames.hpp"

namespace koptim {

const char* to_string(NonFiniteGradient p) { return Impl::enum_name(p); }
const char* to_string(WeightDecayType t) { return Impl::enum_name(t); }
const char* to_string(Grafting g) { return Impl::enum_name(g); }
const char* to_string(CommunicationDType t) { return Impl::enum_name(t); }
const char* to_string(DistributedCostModel m) { return Impl::enum_name(m); }
const char* to_string(Eigenbasis e) { return Impl::enum_name(e); }
const char* to_string(GefenPartitionRule r) { return Impl::enum_name(r); }
const char* to_string(GefenP1SecondMoment m) { return Impl::enum_name(m); }
const char* to_string(GefenSecondMoment k) { return Impl::enum_name(k); }

namespace linalg {
const char* to_string(RootMethod m) { return Impl::enum_name(m); }
const char* to_string(EighSolver s) { return Impl::enum_name(s); }
}  // namespace linalg

}  // namespace koptim
