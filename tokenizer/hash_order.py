"""Iteration order of llama.cpp's `token_to_id` (a libstdc++ `std::unordered_map<std::string, int>`).

llama_vocab::impl::load scans `token_to_id` in its iteration order to pick the EOT / EOM / FIM tokens
by text ("<|im_end|>", "<|endoftext|>", ...): when a vocabulary holds several candidates for one slot,
the first one *in hash-table order* wins (SmolLM2 gets EOT 0 `<|endoftext|>`, Qwen2.5 gets EOT 151645
`<|im_end|>`). To reproduce that we replay the table's life: libstdc++ hashes a string with
`std::_Hash_bytes(data, len, 0xc70f6907)` (libsupc++/hash_bytes.cc, 64-bit), buckets are
`hash % bucket_count`, the bucket count follows `_Prime_rehash_policy` (max load factor 1, growth x2,
primes from `std::__detail::__prime_list`), and both insertion (`_M_insert_bucket_begin`) and rehashing
(`_M_rehash_aux`) put a node at the front of its bucket's run, or, for a bucket that was empty, at the
front of the whole list. So within one bucket array the list is ordered by the time each bucket first
got a node (latest first), then by each node's arrival time in that array (latest first); the arrival
order after a rehash is the previous list order.

Only needed when a slot is ambiguous, and then computed once with numpy (~0.1 s for 150k tokens).
"""

from __future__ import annotations

import numpy as np

_MUL = np.uint64(0xC6A4A7935BD1E995)
_SEED = 0xC70F6907
_M64 = (1 << 64) - 1

# std::__detail::__prime_list (libstdc++ src/shared/hashtable-aux.cc), entries up to 2^32
_PRIMES = (
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109,
    113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409,
    439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741,
    1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949,
    7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281,
    26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817, 78779,
    85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871, 172933, 187091, 202409, 218971, 236897,
    256279, 277261, 299951, 324503, 351061, 379787, 410857, 444487, 480881, 520241, 562841, 608903, 658753,
    712697, 771049, 834181, 902483, 976369, 1056323, 1142821, 1236397, 1337629, 1447153, 1565659, 1693859,
    1832561, 1982627, 2144977, 2320627, 2510653, 2716249, 2938679, 3179303, 3439651, 3721303, 4026031, 4355707,
    4712381, 5098259, 5515729, 5967347, 6456007, 6984629, 7556579, 8175383, 8844859, 9569143, 10352717,
    11200489, 12117689, 13109983, 14183539, 15345007, 16601593, 17961079, 19431899, 21023161, 22744717,
    24607243, 26622317, 28802401, 31160981, 33712729, 36473443, 39460231, 42691603, 46187573, 49969847,
    54061849, 58488943, 63278561, 68460391, 74066549, 80131819, 86693767, 93793069, 101473717, 109783337,
    118773397, 128499677, 139022417, 150406843, 162723577, 176048909, 190465427, 206062531, 222936881,
    241193053, 260944219, 282312799, 305431229, 330442829, 357502601, 386778277, 418451333, 452718089,
    489790921, 529899637, 573292817, 620239453, 671030513, 725980837, 785430967, 849749479, 919334987,
    994618837, 1076067617, 1164186217, 1259520799, 1362662261, 1474249943, 1594975441, 1725587117, 1866894511,
    2019773507, 2185171673, 2364114217, 2557710269, 2767159799, 2993761039, 3238918481, 3504151727, 3791104843,
    4101556399, 4294967291,
)
_FAST_BKT = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)


def hash_bytes(data: bytes, seed: int = _SEED) -> int:
    """std::_Hash_bytes for 64-bit size_t (the slow scalar reference)."""
    mul = int(_MUL)
    n = len(data)
    h = (seed ^ (n * mul)) & _M64
    n8 = n & ~7
    for i in range(0, n8, 8):
        k = (int.from_bytes(data[i : i + 8], "little") * mul) & _M64
        k = ((k ^ (k >> 47)) * mul) & _M64
        h = ((h ^ k) * mul) & _M64
    if n & 7:
        h = ((h ^ int.from_bytes(data[n8:], "little")) * mul) & _M64
    h = ((h ^ (h >> 47)) * mul) & _M64
    return h ^ (h >> 47)


def _load_u64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian uint64 loads of buf[pos : pos + 8] (bytes past the end of buf read as 0).
    buf (size,) uint8, pos (k,) int64 -> (k,) uint64."""
    out = np.zeros(len(pos), dtype=np.uint64)
    size = len(buf)
    inside = pos + 8 <= size
    res = pos % 8
    for r in range(8):
        sel = np.nonzero(inside & (res == r))[0]
        if sel.size:
            view = np.frombuffer(buf, dtype="<u8", offset=r, count=(size - r) // 8)  # unaligned, no copy
            out[sel] = view[(pos[sel] - r) // 8]
    for i in np.nonzero(~inside)[0].tolist():
        p = int(pos[i])
        out[i] = int.from_bytes(bytes(buf[p : p + 8]), "little")
    return out


def hash_many(buf: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """std::_Hash_bytes of n strings stored at buf[offsets[i] : offsets[i] + lengths[i]], vectorized.

    buf (file_size,) uint8; offsets, lengths (n,) int64 -> (n,) uint64."""
    with np.errstate(over="ignore"):
        h = np.uint64(_SEED) ^ (lengths.astype(np.uint64) * _MUL)
        nblocks = lengths // 8
        for j in range(int(nblocks.max(initial=0))):
            rows = np.nonzero(nblocks > j)[0]
            k = _load_u64(buf, offsets[rows] + 8 * j) * _MUL
            k = (k ^ (k >> np.uint64(47))) * _MUL
            h[rows] = (h[rows] ^ k) * _MUL
        tail = lengths & 7
        rows = np.nonzero(tail)[0]
        if rows.size:
            # load_bytes(end, len & 7): the tail bytes little-endian, i.e. an 8-byte load masked
            k = _load_u64(buf, offsets[rows] + 8 * nblocks[rows])
            k &= (np.uint64(1) << (np.uint64(8) * tail[rows].astype(np.uint64))) - np.uint64(1)
            h[rows] = (h[rows] ^ k) * _MUL
        h = (h ^ (h >> np.uint64(47))) * _MUL
        return h ^ (h >> np.uint64(47))


class _RehashPolicy:
    """_Prime_rehash_policy with max_load_factor 1.0."""

    def __init__(self):
        self.next_resize = 0

    def next_bkt(self, n: int) -> int:
        if n < len(_FAST_BKT):
            if n == 0:
                return 1
            self.next_resize = _FAST_BKT[n]
            return _FAST_BKT[n]
        lo, hi = 6, len(_PRIMES) - 1
        while lo < hi:  # lower_bound over __prime_list[6 : last)
            mid = (lo + hi) // 2
            if _PRIMES[mid] < n:
                lo = mid + 1
            else:
                hi = mid
        self.next_resize = _PRIMES[lo]
        return _PRIMES[lo]

    def need_rehash(self, n_bkt: int, n_elt: int, n_ins: int) -> int:
        """New bucket count, or 0 for no rehash."""
        if n_elt + n_ins > self.next_resize:
            min_bkts = max(n_elt + n_ins, 0 if self.next_resize else 11)
            if min_bkts >= n_bkt:
                return self.next_bkt(max(min_bkts + 1, n_bkt * 2))
            self.next_resize = n_bkt
        return 0


def _list_order(buckets: np.ndarray, arrival: np.ndarray) -> np.ndarray:
    """Node order of one bucket array: buckets by first arrival (latest first), then nodes latest first."""
    first = np.full(int(buckets.max(initial=0)) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, buckets, arrival)
    return np.lexsort((-arrival, -first[buckets]))


def iteration_order(hashes: np.ndarray) -> np.ndarray:
    """Node indices (= insertion order, i.e. token ids) in the iteration order of an unordered_map
    filled by inserting keys with these hashes one by one (no duplicate keys). (n,) uint64 -> (n,) int64."""
    n = len(hashes)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    pol = _RehashPolicy()
    n_bkt = 1
    # the insertion indices at which a rehash happens, and the bucket count from there on
    phases: list[tuple[int, int]] = []
    for i in range(n):
        if i + 1 > pol.next_resize:
            new = pol.need_rehash(n_bkt, i, 1)
            if new:
                n_bkt = new
                phases.append((i, n_bkt))
    order = np.zeros(0, dtype=np.int64)
    for p, (start, bkt) in enumerate(phases):
        end = phases[p + 1][0] if p + 1 < len(phases) else n
        nodes = np.concatenate([order, np.arange(start, end, dtype=np.int64)])
        arrival = np.arange(len(nodes), dtype=np.int64)
        buckets = (hashes[nodes] % np.uint64(bkt)).astype(np.int64)
        order = nodes[_list_order(buckets, arrival)]
    return order
