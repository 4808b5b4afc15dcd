// koptim: neural-network optimizers on Kokkos. One include for users.
#ifndef KOPTIM_HPP
#define KOPTIM_HPP

#include <koptim/koptim_Version.hpp>

#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_ParameterSet.hpp>
#include <koptim/core/koptim_Schedule.hpp>
#include <koptim/core/koptim_Optimizer.hpp>
#include <koptim/diagonal/koptim_SGD.hpp>
#include <koptim/diagonal/koptim_AdaGrad.hpp>
#include <koptim/diagonal/koptim_RMSProp.hpp>
#include <koptim/diagonal/koptim_Adam.hpp>
#include <koptim/shampoo/koptim_Shampoo.hpp>
#include <koptim/gefen/koptim_Gefen.hpp>
#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/comm/koptim_GradientAllReduce.hpp>
#include <koptim/config/koptim_Factory.hpp>
#include <koptim/io/koptim_Checkpoint.hpp>

#endif
