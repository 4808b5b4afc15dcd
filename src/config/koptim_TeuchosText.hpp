// One lock for Teuchos' parameter-list readers and writer. Their tables are process-wide (the XML
// converters, the YAML grammar built at its first use) and reached through reference counts that
// a Teuchos built without thread safety (Debian's) does not make atomic, so two host threads in
// them at once race. Every koptim call into them holds this lock: host threads may read, check
// and print parameter lists through koptim at once.
#ifndef KOPTIM_CONFIG_TEUCHOSTEXT_HPP
#define KOPTIM_CONFIG_TEUCHOSTEXT_HPP

#include <mutex>

namespace koptim::Impl {

std::mutex& teuchos_text_mutex();

}  // namespace koptim::Impl

#endif
