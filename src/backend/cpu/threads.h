// How many threads OpenBLAS may use in this rank (threads.cpp says why it matters).
#pragma once

namespace hpc::backend::cpu {

// Sets OpenBLAS's thread count for a rank sharing its node with ranks_on_node
// ranks; returns the count.
int configure_threads(int ranks_on_node);

}  // namespace hpc::backend::cpu
