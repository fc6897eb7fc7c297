#pragma once

// Helpers the passes share: who reads each value, scalar constants, removing nodes, and the
// "unfused" subgraph a fused node keeps for the element types its kernel does not compute.

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "engine/ir/graph.h"
#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Readers of every value of a graph. A value that a subgraph reads (an implicit input) or that
// the graph returns counts as read twice more, so it is never fused away.
struct ValueUses {
  std::vector<int> count;     // per value: reads (node inputs, +2 per implicit read or output)
  std::vector<int> consumer;  // per value: the last node that reads it (meaningful when count 1)

  explicit ValueUses(const Graph& graph);
  bool Single(ValueId v) const { return v != kNoValue && count[v] == 1; }
};

// True for an ONNX-domain node of `op_type` with exactly these input and output counts, every
// one present.
bool IsOp(const Node& node, const char* op_type, size_t inputs, size_t outputs);

// The float value of a one-element float32 constant, else nullopt.
std::optional<float> ScalarConstant(const TransformContext& context, ValueId id);

// Whether `t` broadcast against a result of rank `rank` whose axis 1 has `channels` entries (a
// Conv's [N, M, spatial...]) varies along axis 1 only and leaves the result's shape alone: one
// element of rank <= `rank`, or [M, 1, ...] of rank - 1, or [1, M, 1, ...] of rank.
bool BroadcastsPerChannel(const Tensor& t, int64_t rank, int64_t channels);

// The "body" attribute of a Loop node that has its loop info and a body graph, else null: what
// the loop passes rewrite.
Attribute* LoopBodyAttribute(Node& node);

// Rebuilds graph.nodes in order: each Loop node with a body (LoopBodyAttribute) goes after what
// `rewrite(loop, body, nodes)` appends to the new list `nodes` (nodes that move before the Loop);
// `rewrite` may change the Loop and its body attribute. The other nodes are kept as they are.
void RewriteLoops(
    Graph& graph,
    absl::FunctionRef<void(Node& loop, Attribute& body, std::vector<Node>& nodes)> rewrite);

// Drops the nodes marked in `removed` (keeping the others' order).
void RemoveNodes(Graph& graph, const std::vector<bool>& removed);

// A fusion pass's walk over the graph: `fuse(n, uses, removed)` on every node n not yet marked in
// `removed`, in order, with the readers counted before the walk; it returns whether it rewrote
// the graph, marking the nodes it merged away. The marked nodes are dropped at the end.
void FuseEachNode(
    Graph& graph,
    absl::FunctionRef<bool(int n, const ValueUses& uses, std::vector<bool>& removed)> fuse);

// Puts `fused` at node `last` (one of `nodes`) and marks the other `nodes` removed, for a later
// RemoveNodes: how every fusion pass replaces the nodes it merged.
void ReplaceNodes(Graph& graph, const std::vector<int>& nodes, int last, Node fused,
                  std::vector<bool>& removed);

// "MatMul 'a' + Add 'b'": the nodes a rewrite merged, for its log line.
std::string DescribeNodes(const Graph& graph, const std::vector<int>& nodes);

// A graph of copies of `graph.nodes[indices]` (in that order) whose inputs are `inputs` and whose
// output is `output`, with the values they touch renumbered: a fused node's fallback.
std::shared_ptr<const Graph> ExtractSubgraph(const Graph& graph, const std::vector<int>& indices,
                                             const std::vector<ValueId>& inputs, ValueId output);

}  // namespace loopserve::engine::transform
