#include "unwind_core/chain.hpp"
namespace popart_unwind::core { Chain Chain::canonicalized() const { return *this; } }
