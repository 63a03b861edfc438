// SPDX-License-Identifier: Apache-2.0
// The storage of visit tables (dash::TableAllocator, dash/plan.hpp): large tables on 2 MiB boundaries, advised for
// transparent huge pages.
#include <cstdlib>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "dash/plan.hpp"

namespace dash::detail {
namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}  // namespace

void* allocate_table(size_t bytes) {
  if (bytes < kHugePage) {
    if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
    throw std::bad_alloc();
  }
  // Aligned, the table's whole 2 MiB stretches can be huge pages; its tail stays in small pages, so a table wastes
  // no more than it would in small pages. Where the kernel does not offer huge pages (transparent_hugepage set to
  // never, or another system), the advice does nothing and the pages are small.
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, bytes) != 0) throw std::bad_alloc();
#ifdef __linux__
  madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return p;
}

void free_table(void* table) noexcept { std::free(table); }

}  // namespace dash::detail
