// Writes the seed corpora of the import_state and checkpoint targets: for every optimizer kind,
// the encoded state (and a checkpoint file) after two steps on the fuzzers' parameters.
// The parameter-list corpora get every optimizer's defaults as Teuchos writes them, plus lists
// with a schedule and Shampoo's patterned sublist.
//   koptim_fuzz_seeds <corpus dir>   (writes <dir>/{import_state,checkpoint,parameter_list_xml,
//                                     parameter_list_yaml}/...)
#include "koptim_FuzzCommon.hpp"

#include <koptim/io/koptim_Checkpoint.hpp>

#include <Teuchos_XMLParameterListCoreHelpers.hpp>
#include <Teuchos_YamlParameterListCoreHelpers.hpp>

#include <fstream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: koptim_fuzz_seeds <corpus dir>\n");
    return 2;
  }
  koptim_fuzz::start();
  const std::string dir = argv[1];
  for (std::size_t k = 0; k < koptim_fuzz::kinds().size(); ++k) {
    const std::string& name = koptim_fuzz::kinds()[k];
    koptim_fuzz::Params params;
    auto opt = koptim_fuzz::make(name, params.set);
    for (int s = 0; s < 2; ++s) {
      params.fill(s);
      opt->step();
    }
    const auto bytes = koptim_fuzz::encode(static_cast<std::uint8_t>(k), opt->export_state());
    std::ofstream(dir + "/import_state/" + name + ".bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    koptim::io::save_checkpoint(dir + "/checkpoint/" + name + ".h5", *opt);
    Teuchos::ParameterList defaults = koptim::default_parameter_list(name);
    if (name == "SGD") defaults.set("lr", 0.1);
    std::ofstream xml(dir + "/parameter_list_xml/" + name + "_defaults.xml");
    Teuchos::writeParameterListToXmlOStream(defaults, xml);
    std::ofstream yaml(dir + "/parameter_list_yaml/" + name + "_defaults.yaml");
    Teuchos::writeParameterListToYamlOStream(defaults, yaml);
  }
  Teuchos::ParameterList s("koptim");
  s.set("optimizer", std::string("Shampoo"));
  s.set("grafting", std::string("Adam"));
  s.sublist("inverse_exponent_override").set("order_2", 0.25);
  s.sublist("inverse_exponent_override").set("order_2_dim_1", 0.0);
  s.sublist("lr_schedule").set("type", std::string("cosine"));
  s.sublist("lr_schedule").set("total_steps", 100);
  s.sublist("lr_schedule").set("warmup_steps", 10);
  std::ofstream xml(dir + "/parameter_list_xml/Shampoo_overrides.xml");
  Teuchos::writeParameterListToXmlOStream(s, xml);
  std::ofstream yaml(dir + "/parameter_list_yaml/Shampoo_overrides.yaml");
  Teuchos::writeParameterListToYamlOStream(s, yaml);
  return 0;
}
