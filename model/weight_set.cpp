#include "model/weight_set.hpp"

namespace specpipe {

weight_set dense_weight_set(const model_weights& w) {
  weight_set s;
  s.layers.reserve(w.layers.size());
  for (const auto& l : w.layers) {
    layer_linears d;
    d.wq.dense = l.wq;
    d.wk.dense = l.wk;
    d.wv.dense = l.wv;
    d.wo.dense = l.wo;
    d.w_gate.dense = l.w_gate;
    d.w_up.dense = l.w_up;
    d.w_down.dense = l.w_down;
    s.layers.push_back(d);
  }
  s.lm_head.dense = w.lm_head;
  return s;
}

}  // namespace specpipe
