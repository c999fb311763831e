// The merge list of a BPE vocabulary as an open-addressing hash table:
// (left id, right id) → (rank, merged id). Looked up once per candidate pair
// while merging, so it is a flat array (one cache line per probe), not a
// node-based std::unordered_map; 300k merges take 8 MiB.
#pragma once

#include <cstdint>
#include <vector>

namespace hpc::text {

class MergeTable {
 public:
  struct Merge {
    int32_t rank = -1;  // position in the merge list: lower merges first
    int32_t id = -1;    // the merged token
  };

  explicit MergeTable(size_t merges = 0) {
    size_t capacity = 16;
    while (capacity < 2 * merges) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }

  // Adds a merge. A pair listed twice keeps its last rank, as Hugging Face tokenizers' map does.
  void insert(int32_t left, int32_t right, Merge merge) {
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == EMPTY || slots_[i].key == key) {
        slots_[i] = {key, merge};
        return;
      }
    }
  }

  // The merge of (left, right), or nullptr.
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == EMPTY) return nullptr;
    }
  }

 private:
  static constexpr uint64_t EMPTY = ~uint64_t{0};  // no pair of non-negative ids packs to it
  struct Slot {
    uint64_t key = EMPTY;
    Merge merge;
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask_;
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace hpc::text
