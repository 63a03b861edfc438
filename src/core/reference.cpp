// SPDX-License-Identifier: Apache-2.0
// The CPU backend (see dash/reference.hpp): fp32 attention forward, and a backward that sums every
// gradient in the order the plan promises. Blocks are recomputed where that keeps the code simple.
// Precision: fp32 tensors and fp32 dQ / dK / dV accumulators added in the plan's order, as on the GPU; the
// sums inside one block (dot products over the head dim, a visit's partial over its rows or keys, a row's
// softmax) are carried in double and rounded once, so that the backend's error stays within that of fp32
// math done by PyTorch (tests/attention_reference.py) and is dominated by the ordered fp32 adds.
#include "dash/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dash::reference {
namespace {

double dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t d = 0; d < n; ++d) s += double(a[d]) * b[d];
  return s;
}

// One (Q tile, KV tile) block of one head: P and dS in fp32 over the block's in-range rows and keys.
struct Block {
  int64_t row0, rows, key0, keys;
  std::vector<float> p, ds; // [rows * keys]
};

class BackwardContext {
 public:
  BackwardContext(const Plan& plan, float scale, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& o, const Tensor& d_o, const float* lse)
      : plan_(plan), problem_(plan.problem()), grid_(problem_, {plan.header.block_m, plan.header.block_n}),
        scale_(scale), q_(q), k_(k), v_(v), do_(d_o), lse_(lse) {
    // delta_i = rowsum(dO * O), the softmax backward's correction term (over the value head dim).
    const int64_t dv = problem_.value_head_dim();
    delta_.resize(size_t(problem_.batch) * problem_.heads_q * problem_.seqlen_q);
    for (int32_t b = 0; b < problem_.batch; ++b)
      for (int32_t h = 0; h < problem_.heads_q; ++h)
        for (int32_t i = 0; i < problem_.seqlen_q; ++i)
          delta_[row_index(b, h, i)] = float(dot(d_o.at(b, i, h), o.at(b, i, h), dv));
  }

  size_t row_index(int64_t b, int64_t h, int64_t i) const {
    return size_t((b * problem_.heads_q + h) * problem_.seqlen_q + i);
  }

  Block block(int32_t b, int32_t hq, int32_t q_tile, int32_t kv_tile) const {
    const int32_t hk = hq / problem_.group_size();
    const int64_t d = problem_.head_dim, dv = problem_.value_head_dim();
    Block blk;
    blk.row0 = int64_t(q_tile) * plan_.header.block_m;
    blk.rows = std::min<int64_t>(problem_.seqlen_q, blk.row0 + plan_.header.block_m) - blk.row0;
    blk.key0 = int64_t(kv_tile) * plan_.header.block_n;
    blk.keys = std::min<int64_t>(problem_.seqlen_k, blk.key0 + plan_.header.block_n) - blk.key0;
    blk.p.assign(size_t(blk.rows * blk.keys), 0.f);
    blk.ds.assign(size_t(blk.rows * blk.keys), 0.f);
    for (int64_t r = 0; r < blk.rows; ++r) {
      const int64_t i = blk.row0 + r;
      const float lse = lse_[row_index(b, hq, i)];
      if (std::isinf(lse)) continue; // the row sees no key: no gradient flows through it
      int64_t first, last;
      grid_.visible_keys(i, first, last);
      for (int64_t c = 0; c < blk.keys; ++c) {
        const int64_t j = blk.key0 + c;
        if (j < first || j > last) continue;
        const double p = std::exp(scale_ * dot(q_.at(b, i, hq), k_.at(b, j, hk), d) - lse);
        const double dp = dot(do_.at(b, i, hq), v_.at(b, j, hk), dv);
        blk.p[size_t(r * blk.keys + c)] = float(p);
        blk.ds[size_t(r * blk.keys + c)] = float(p * (dp - delta_[row_index(b, hq, i)]));
      }
    }
    return blk;
  }

  const Plan& plan_;
  const Problem problem_;
  const TileGrid grid_;
  const float scale_;
  const Tensor q_, k_, v_, do_;
  const float* lse_;
  std::vector<float> delta_;
};

} // namespace

void forward(const Problem& problem, float scale, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& o, float* lse) {
  problem.validate();
  const TileGrid grid(problem, {1, 1});
  const int64_t d = problem.head_dim, dv = problem.value_head_dim();  // of q and k; of v and o
  std::vector<double> s(static_cast<size_t>(problem.seqlen_k)), out_row(static_cast<size_t>(dv));
  for (int32_t b = 0; b < problem.batch; ++b) {
    for (int32_t h = 0; h < problem.heads_q; ++h) {
      const int32_t hk = h / problem.group_size();
      for (int32_t i = 0; i < problem.seqlen_q; ++i) {
        int64_t first, last;
        grid.visible_keys(i, first, last);
        float* out = o.at(b, i, h);
        std::fill(out, out + dv, 0.f);
        float& row_lse = lse[(int64_t(b) * problem.heads_q + h) * problem.seqlen_q + i];
        if (first > last) {
          row_lse = -std::numeric_limits<float>::infinity();
          continue;
        }
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j <= last; ++j) m = std::max(m, s[size_t(j)] = scale * dot(q.at(b, i, h), k.at(b, j, hk), d));
        double l = 0.0;
        std::fill(out_row.begin(), out_row.end(), 0.0);
        for (int64_t j = first; j <= last; ++j) {
          const double p = std::exp(s[size_t(j)] - m);
          l += p;
          const float* vj = v.at(b, j, hk);
          for (int64_t c = 0; c < dv; ++c) out_row[size_t(c)] += p * vj[c];
        }
        for (int64_t c = 0; c < dv; ++c) out[c] = float(out_row[size_t(c)] / l);
        row_lse = float(m + std::log(l));
      }
    }
  }
}

void backward(const Plan& plan, float scale, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
              const Tensor& d_o, const float* lse, const Tensor& dq, const Tensor& dk, const Tensor& dv_grad) {
  const BackwardContext ctx(plan, scale, q, k, v, o, d_o, lse);
  const Problem& p = ctx.problem_;
  const dash_plan_header& h = plan.header;
  // d: columns of q, k, dq, dk; dv: of v, o, dO, dv (equal but for MLA-style rows such as 192 / 128).
  const int64_t d = p.head_dim, dv = p.value_head_dim(), bm = h.block_m, bn = h.block_n;

  // dK, dV: fp32 accumulators per (batch, KV head, key row); each segment sums its visits in plan order,
  // then adds into the accumulator — in SPLIT_HEADS mode the units of a group arrive in group-rank order
  // because units are numbered in that order.
  const size_t key_rows = size_t(p.batch) * p.heads_kv * p.seqlen_k;
  std::vector<float> dk_acc(key_rows * d, 0.f), dv_acc(key_rows * dv, 0.f);
  auto acc_row = [&](std::vector<float>& acc, int64_t b, int64_t hk, int64_t j, int64_t width) {
    return acc.data() + ((b * p.heads_kv + hk) * p.seqlen_k + j) * width;
  };
  // dQ: per accumulator, contributions in rank order. visits_by_rank[(head_in_unit, q_tile)][rank].
  std::vector<std::vector<std::pair<int32_t, int32_t>>> by_rank(size_t(h.heads_per_unit) * h.num_q_tiles);
  for (size_t a = 0; a < by_rank.size(); ++a) by_rank[a].resize(plan.dq_count[a]);
  for (const dash_segment& seg : plan.segments)
    for (int32_t vi = seg.first_visit; vi < seg.first_visit + seg.num_visits; ++vi) {
      const dash_visit& vis = plan.visits[vi];
      by_rank[size_t(vis.head_in_unit) * h.num_q_tiles + vis.q_tile][vis.dq_rank] = {seg.kv_tile, vi};
    }

  std::vector<float> seg_dk(size_t(bn * d)), seg_dv(size_t(bn * dv));
  std::vector<double> visit_dk(size_t(bn * d)), visit_dv(size_t(bn * dv));
  for (int32_t unit = 0; unit < h.num_units; ++unit) {
    const dash_unit_coords uc = dash_unit_coords_of(&plan.header, plan.group_head_by_rank.data(), unit);
    auto head_of = [&](const dash_visit& vis) {
      return uc.head_q >= 0 ? uc.head_q : uc.head_kv * h.group_size + vis.head_in_unit;
    };
    for (const dash_segment& seg : plan.segments) {
      // The segment's dK / dV in fp32, one visit's partial added after another in visit order (as the GPU's
      // registers do); each partial (a sum over the block's rows) in double.
      std::fill(seg_dk.begin(), seg_dk.end(), 0.f);
      std::fill(seg_dv.begin(), seg_dv.end(), 0.f);
      int64_t keys = 0;
      for (int32_t vi = seg.first_visit; vi < seg.first_visit + seg.num_visits; ++vi) {
        const dash_visit& vis = plan.visits[vi];
        const int32_t hq = head_of(vis);
        const Block blk = ctx.block(uc.batch, hq, vis.q_tile, seg.kv_tile);
        keys = blk.keys;
        std::fill(visit_dk.begin(), visit_dk.end(), 0.0);
        std::fill(visit_dv.begin(), visit_dv.end(), 0.0);
        for (int64_t c = 0; c < blk.keys; ++c)
          for (int64_t r = 0; r < blk.rows; ++r) {
            const double pij = blk.p[size_t(r * blk.keys + c)], dsij = blk.ds[size_t(r * blk.keys + c)];
            const float* qi = q.at(uc.batch, blk.row0 + r, hq);
            const float* doi = d_o.at(uc.batch, blk.row0 + r, hq);
            for (int64_t e = 0; e < dv; ++e) visit_dv[size_t(c * dv + e)] += pij * doi[e];
            for (int64_t e = 0; e < d; ++e) visit_dk[size_t(c * d + e)] += dsij * qi[e];
          }
        for (size_t x = 0; x < seg_dk.size(); ++x) seg_dk[x] += float(visit_dk[x]);
        for (size_t x = 0; x < seg_dv.size(); ++x) seg_dv[x] += float(visit_dv[x]);
      }
      for (int64_t c = 0; c < keys; ++c) {
        float* dk_row = acc_row(dk_acc, uc.batch, uc.head_kv, int64_t(seg.kv_tile) * bn + c, d);
        float* dv_row = acc_row(dv_acc, uc.batch, uc.head_kv, int64_t(seg.kv_tile) * bn + c, dv);
        for (int64_t e = 0; e < d; ++e) dk_row[e] += seg_dk[size_t(c * d + e)];
        for (int64_t e = 0; e < dv; ++e) dv_row[e] += seg_dv[size_t(c * dv + e)];
      }
    }

    // dQ of this unit, accumulator by accumulator, contributions in rank order.
    for (int32_t head_in_unit = 0; head_in_unit < h.heads_per_unit; ++head_in_unit) {
      const int32_t hq = uc.head_q >= 0 ? uc.head_q : uc.head_kv * h.group_size + head_in_unit;
      for (int32_t qt = 0; qt < h.num_q_tiles; ++qt) {
        const int64_t row0 = int64_t(qt) * bm, rows = std::min<int64_t>(p.seqlen_q, row0 + bm) - row0;
        std::vector<float> acc(size_t(rows * d), 0.f);
        std::vector<double> partial(size_t(rows * d));
        for (auto [kv_tile, vi] : by_rank[size_t(head_in_unit) * h.num_q_tiles + qt]) {
          (void)vi;
          const Block blk = ctx.block(uc.batch, hq, qt, kv_tile);
          std::fill(partial.begin(), partial.end(), 0.0);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < blk.keys; ++c) {
              const float dsij = blk.ds[size_t(r * blk.keys + c)];
              const float* kj = k.at(uc.batch, blk.key0 + c, uc.head_kv);
              for (int64_t e = 0; e < d; ++e) partial[size_t(r * d + e)] += double(dsij) * kj[e];
            }
          for (size_t x = 0; x < acc.size(); ++x) acc[x] += float(partial[x]); // the ordered add
        }
        for (int64_t r = 0; r < rows; ++r) {
          float* out = dq.at(uc.batch, row0 + r, hq);
          for (int64_t e = 0; e < d; ++e) out[e] = scale * acc[size_t(r * d + e)];
        }
      }
    }
  }
  for (int32_t b = 0; b < p.batch; ++b)
    for (int32_t hk = 0; hk < p.heads_kv; ++hk)
      for (int32_t j = 0; j < p.seqlen_k; ++j) {
        const float* dk_row = acc_row(dk_acc, b, hk, j, d);
        const float* dv_row = acc_row(dv_acc, b, hk, j, dv);
        float* dk_out = dk.at(b, j, hk);
        float* dv_out = dv_grad.at(b, j, hk);
        for (int64_t e = 0; e < d; ++e) dk_out[e] = scale * dk_row[e];
        for (int64_t e = 0; e < dv; ++e) dv_out[e] = dv_row[e];
      }
}

} // namespace dash::reference
