// This build has no Gloo headers (see cmake/BrrrDependencies.cmake): CPU process groups say so.
#include "core/error.h"
#include "trainer/dist/process_group.h"

namespace brrr {

bool gloo_available() {
  return false;
}

namespace detail {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, std::chrono::milliseconds) {
  throw Error(
      "this brrr was built without c10d's Gloo backend (its headers were not found: install "
      "libgloo-dev, or run scripts/setup.sh, and rebuild), so it cannot train on several CPU "
      "processes");
}

}  // namespace detail
}  // namespace brrr
