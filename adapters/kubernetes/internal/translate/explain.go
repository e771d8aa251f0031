package translate

// Placer's explanation of an unplaced job, told as kube-scheduler tells a
// pod's: "0/16 nodes are available: 2 node(s) didn't match pod anti-affinity
// rules, 14 Insufficient nvidia.com/gpu." Placer counts each node under the
// first of its checks the node fails; the requirements a job's pod rules
// and side resources added (rules.go) are node affinity to Placer, so the
// nodes they alone exclude are given back here to the reason
// kube-scheduler's filters would give, in their order (taints, node
// affinity, host ports, resources, topology spread, inter-pod affinity).

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

const (
	affinityMiss = "node(s) didn't match Pod's node affinity/selector"
	shareWhy     = "node(s) had no GPU with a large enough free share"
)

func aboutRoom(r wire.UnplacedReason) bool {
	switch r {
	case wire.UnplacedReasonNoFeasibleNode, wire.UnplacedReasonInsufficientCapacity, wire.UnplacedReasonGangIncomplete,
		wire.UnplacedReasonTopologyUnsatisfiable, wire.UnplacedReasonReserved:
		return true
	}
	return false
}

// exclusionWords: a count of Placer's explanation in kube-scheduler's words.
func exclusionWords(x *wire.ExclusionCountT, u *wire.UnplacedT) string {
	switch x.Reason {
	case wire.NodeExclusionUnhealthy:
		return "node(s) were unhealthy"
	case wire.NodeExclusionPool:
		return "node(s) were in another pool"
	case wire.NodeExclusionGpuModel: // Placer's model check: a GPU pod on a node without GPUs
		return "Insufficient " + string(GPUResource)
	case wire.NodeExclusionAffinity:
		return affinityMiss
	case wire.NodeExclusionTaint:
		return taintWords(x.Detail)
	case wire.NodeExclusionCpu:
		return "Insufficient cpu"
	case wire.NodeExclusionMemory:
		return "Insufficient memory"
	case wire.NodeExclusionGpus:
		return "Insufficient " + string(GPUResource)
	case wire.NodeExclusionGpuShare:
		return shareWhy
	case wire.NodeExclusionTaken:
		if u.Outbid {
			return fmt.Sprintf("node(s) were taken by this round's placements (outbid by priority %d)", u.OutbidPriority)
		}
		return "node(s) were taken by this round's placements"
	}
	return wire.EnumNamesNodeExclusion[x.Reason]
}

// taintWords: Placer's "key=value:Effect" as kube-scheduler says it:
// "node(s) had untolerated taint {key: value}", and a cordoned node's
// taint as "node(s) were unschedulable".
func taintWords(detail string) string {
	kv := detail
	if i := strings.LastIndex(detail, ":"); i >= 0 {
		kv = detail[:i]
	}
	k, v, _ := strings.Cut(kv, "=")
	if k == corev1.TaintNodeUnschedulable {
		return "node(s) were unschedulable"
	}
	return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", k, v)
}

// Explain is job j's Unplaced entry as its pods' condition says it
// (after Placed, the nodes this round's placements took told as what they
// then lack):
// Placer's explanation in kube-scheduler's words (reasons sorted as
// kube-scheduler sorts them), after Placer's word that the pod can never
// run on this cluster as it is, when it says so and no pod rule had a
// part in it; other reasons as "Reason: detail".
func (r *Round) Explain(j int, u *wire.UnplacedT) string {
	if !aboutRoom(u.Reason) || u.Nodes == 0 {
		if u.Detail != "" {
			return wire.EnumNamesUnplacedReason[u.Reason] + ": " + u.Detail
		}
		return wire.EnumNamesUnplacedReason[u.Reason]
	}
	counts := map[string]int{}
	excluded := 0
	for _, x := range u.Excluded {
		counts[exclusionWords(x, u)] += int(x.Nodes)
		excluded += int(x.Nodes)
	}
	moved := 0
	if taken := takenWords(counts); taken != "" && r.after != nil && j >= 0 && j < len(r.Units) {
		for _, w := range sortedKeys(r.takenAs(j)) {
			k := min(r.takenAs(j)[w], counts[taken])
			counts[taken] -= k
			counts[w] += k
			moved += k
		}
		if counts[taken] == 0 {
			delete(counts, taken)
		}
	}
	if j >= 0 && j < len(r.rules) && len(r.rules[j]) > 0 && counts[affinityMiss] > 0 {
		for w, n := range r.reattribute(j) {
			if n > counts[affinityMiss] {
				n = counts[affinityMiss]
			}
			counts[affinityMiss] -= n
			counts[w] += n
			moved += n
		}
		if counts[affinityMiss] == 0 {
			delete(counts, affinityMiss)
		}
	}
	if j >= 0 && j < len(r.claims) && r.claims[j] { // its GPUs are devices: kube-scheduler's DynamicResources says so
		for _, w := range []string{"Insufficient " + string(GPUResource), shareWhy} {
			if n := counts[w]; n > 0 {
				counts[dra.CannotAllocate] += n
				delete(counts, w)
			}
		}
	}
	var b strings.Builder
	if u.Never && moved == 0 {
		b.WriteString("It can never run on this cluster as it is: ")
		switch {
		case u.ReplicasFitEmpty == 0:
			b.WriteString("no node could hold one replica even empty. ")
		case u.ReplicasFitEmpty < u.ReplicasRequired:
			fmt.Fprintf(&b, "it needs %s replicas at once, and the nodes that admit it could hold at most %s even empty. ",
				thousands(int64(u.ReplicasRequired)), thousands(int64(u.ReplicasFitEmpty)))
		default:
			fmt.Fprintf(&b, "it needs %s replicas at once, and no domain of its required level could hold more than %s even empty. ",
				thousands(int64(u.ReplicasRequired)), thousands(int64(u.BestDomainFitEmpty)))
		}
	}
	fmt.Fprintf(&b, "%s/%s nodes are available", thousands(int64(int(u.Nodes)-excluded)), thousands(int64(u.Nodes)))
	var reasons []string
	for w, n := range counts {
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("%d %s", n, w))
		}
	}
	sort.Strings(reasons) // as kube-scheduler's FitError
	if len(reasons) > 0 {
		b.WriteString(": " + strings.Join(reasons, ", "))
	}
	b.WriteString(".")
	if u.ReplicasRequired > 1 && (j < 0 || j >= len(r.Request.Pending) || r.Request.Pending[j].Gang) { // a gang's: all at once
		fmt.Fprintf(&b, " Resources were found for %s replica(s) while %s are required", thousands(int64(u.ReplicasFit)), thousands(int64(u.ReplicasRequired)))
		if u.BestDomain != "" {
			fmt.Fprintf(&b, "; the best domain, '%s', holds %s", u.BestDomain, thousands(int64(u.BestDomainFit)))
		}
		b.WriteString(".")
	}
	return b.String()
}

func takenWords(counts map[string]int) string {
	for w, n := range counts {
		if n > 0 && strings.HasPrefix(w, "node(s) were taken") {
			return w
		}
	}
	return ""
}

// Placed records the round's placements (Placer's reply), so that
// Explain tells the nodes they took from an unplaced job as kube-scheduler
// will see them once they are bound: what the node then lacks, or, for a
// node a replica of the job's own took when its pods must sit on distinct
// nodes, that rule (anti-affinity, host ports).
func (r *Round) Placed(res *wire.ScheduleReplyT) {
	r.after = make([]wire.NodeT, len(r.C.Wire))
	for i, n := range r.C.Wire {
		r.after[i] = *n
		r.after[i].GpuFreeMilli = append([]uint16(nil), n.GpuFreeMilli...)
	}
	r.ownOn = map[[2]int]bool{}
	for _, pl := range res.Placements {
		if int(pl.Job) >= len(r.Request.Pending) {
			continue
		}
		d := r.Request.Pending[pl.Job].Demand
		for _, rp := range pl.Replicas {
			if int(rp.Node) >= len(r.after) {
				continue
			}
			n := &r.after[rp.Node]
			r.ownOn[[2]int{int(pl.Job), int(rp.Node)}] = true
			n.CpuMilliFree -= d.CpuMilli
			n.MemoryMibFree -= d.MemoryMib
			for _, g := range rp.Gpus {
				if int(g) < len(n.GpuFreeMilli) {
					n.GpuFreeMilli[g] -= min(n.GpuFreeMilli[g], rp.GpuMilli)
				}
			}
		}
	}
}

// takenAs: the nodes that had room for job j at the round's start (every
// check passed) and lack it after the round's placements, by
// kube-scheduler's words for them.
func (r *Round) takenAs(j int) map[string]int {
	out := map[string]int{}
	job := r.Request.Pending[j]
	for i, n := range r.C.Nodes {
		wn := r.C.Wire[i]
		if !wn.Healthy || (job.Demand.Gpus > 0 && len(wn.GpuFreeMilli) == 0) || !admits(n, job.Constraints) ||
			untolerated(wn, job.Constraints) != "" || roomMiss(wn, job.Demand) != "" {
			continue
		}
		switch w := roomMiss(&r.after[i], job.Demand); {
		case r.Units[j].DistinctNodes && r.ownOn[[2]int{j, i}]:
			out[r.Units[j].distinctWhy()]++
		case w != "":
			out[w]++
		}
	}
	return out
}

// reattribute: the nodes Placer counted under node affinity that only job
// j's rules exclude, by the reason kube-scheduler would give them once the
// round's placements are bound (after Placed: a node one of them filled
// lacks room first, as NodeResourcesFit comes before the pod rules).
func (r *Round) reattribute(j int) map[string]int {
	out := map[string]int{}
	job := r.Request.Pending[j]
	own := r.own[j]
	rules := append([]rule(nil), r.rules[j]...)
	sort.SliceStable(rules, func(a, b int) bool { return rules[a].order < rules[b].order })
	for i, n := range r.C.Nodes {
		wn := r.C.Wire[i]
		if !wn.Healthy || (job.Demand.Gpus > 0 && len(wn.GpuFreeMilli) == 0) || !admits(n, own) {
			continue // Placer's own count stands
		}
		first := -1
		for k := range rules {
			if !r.C.matches(n, rules[k].req) {
				first = k
				break
			}
		}
		if first < 0 {
			continue
		}
		after := wn
		if r.after != nil {
			after = &r.after[i]
		}
		switch {
		case untolerated(wn, own) != "":
			out[taintWords(untolerated(wn, own))]++
		case rules[first].order <= orderPorts:
			out[rules[first].why]++
		case roomMiss(after, job.Demand) != "":
			out[roomMiss(after, job.Demand)]++
		default:
			out[rules[first].why]++
		}
	}
	return out
}

// nodeLabel: a node's label as the round has it (with NodeLabel).
func nodeLabel(n *corev1.Node, key string) (string, bool) {
	if key == NodeLabel {
		return n.Name, true
	}
	v, ok := n.Labels[key]
	return v, ok
}

// requirementMatches: Placer's meaning of a requirement (constraints.cpp).
func requirementMatches(n *corev1.Node, e *wire.SelectorRequirementT) bool {
	v, has := nodeLabel(n, e.Key)
	listed := false
	for _, x := range e.Values {
		listed = listed || x == v
	}
	switch e.Operator {
	case wire.SelectorOperatorIn:
		return has && listed
	case wire.SelectorOperatorNotIn:
		return !has || !listed
	case wire.SelectorOperatorExists:
		return has
	case wire.SelectorOperatorDoesNotExist:
		return !has
	case wire.SelectorOperatorGt, wire.SelectorOperatorLt:
		if !has || len(e.Values) != 1 {
			return false
		}
		a, err1 := strconv.ParseInt(v, 10, 64)
		b, err2 := strconv.ParseInt(e.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		return (e.Operator == wire.SelectorOperatorGt && a > b) || (e.Operator == wire.SelectorOperatorLt && a < b)
	}
	return false
}

// admits: node selector and required node affinity (terms ORed).
func admits(n *corev1.Node, c *wire.NodeConstraintsT) bool {
	for _, s := range c.NodeSelector {
		k, want, _ := strings.Cut(s, "=")
		if v, ok := nodeLabel(n, k); !ok || v != want {
			return false
		}
	}
	if len(c.Required) == 0 {
		return true
	}
	for _, t := range c.Required {
		ok := len(t.MatchExpressions) > 0
		for _, e := range t.MatchExpressions {
			ok = ok && requirementMatches(n, e)
		}
		if ok {
			return true
		}
	}
	return false
}

// untolerated: the node's first NoSchedule or NoExecute taint the job
// does not tolerate, as "key=value:Effect" ("" = none).
func untolerated(n *wire.NodeT, c *wire.NodeConstraintsT) string {
	for _, t := range n.Taints {
		if t.Effect == wire.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for _, o := range c.Tolerations {
			if o.Effect != wire.TolerationEffectAll && int(o.Effect)-1 != int(t.Effect) {
				continue
			}
			if o.Key != "" && o.Key != t.Key {
				continue
			}
			if o.Operator == wire.TolerationOperatorExists || o.Value == t.Value {
				ok = true
				break
			}
		}
		if !ok {
			return t.Key + "=" + t.Value + ":" + wire.EnumNamesTaintEffect[t.Effect]
		}
	}
	return ""
}

// roomMiss: the first of CPU, memory and GPUs the node lacks at the
// round's start for one replica of d, in kube-scheduler's words.
func roomMiss(n *wire.NodeT, d *wire.DemandT) string {
	switch {
	case d.CpuMilli > n.CpuMilliFree:
		return "Insufficient cpu"
	case d.MemoryMib > n.MemoryMibFree:
		return "Insufficient memory"
	}
	if d.Gpus == 0 {
		return ""
	}
	whole, share := 0, false
	for _, f := range n.GpuFreeMilli {
		if f == 1000 {
			whole++
		}
		share = share || f >= d.GpuMilli
	}
	if d.GpuMilli < 1000 {
		if !share {
			return shareWhy
		}
		return ""
	}
	if whole < int(d.Gpus) {
		return "Insufficient " + string(GPUResource)
	}
	return ""
}

func thousands(v int64) string {
	s := strconv.FormatInt(v, 10)
	for i := len(s) - 3; i > 0 && (v >= 0 || i > 1); i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
