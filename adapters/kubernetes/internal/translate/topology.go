package translate

// The round's topology: the node labels of Options.TopologyLabels (finest
// first, as --rack-label lists them, e.g. the NVLink clique, the rack, the
// zone) as the levels of Placer's topology under the cluster, coarsest
// first. A node's domain is its values of those labels: a domain of one
// level is as many domains as the parents it is seen under (a rack r1 in
// two zones is two racks), and a node that lacks a label sits under the
// deepest domain it has (no clique label: in its rack).

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// Domain is a topology domain: its nodes' values of the topology labels,
// coarsest first ("" for a label its nodes lack), up to its own level's
// value. Nil (or empty): none but the cluster.
type Domain []string

// DomainOf is node n's domain under `labels` (finest first).
func DomainOf(n *corev1.Node, labels []string) Domain {
	d := make(Domain, len(labels))
	for i, l := range labels {
		d[len(labels)-1-i] = n.Labels[l]
	}
	return d.trim()
}

// trim cuts d after its last value.
func (d Domain) trim() Domain {
	for len(d) > 0 && d[len(d)-1] == "" {
		d = d[:len(d)-1]
	}
	return d
}

// Common is the deepest domain that holds every domain of ds (nil: only
// the cluster, or ds is empty).
func Common(ds []Domain) Domain {
	if len(ds) == 0 {
		return nil
	}
	out := ds[0]
	for _, d := range ds[1:] {
		k := 0
		for k < len(out) && k < len(d) && out[k] == d[k] {
			k++
		}
		out = out[:k]
	}
	return append(Domain(nil), out.trim()...)
}

// name: a domain's name in the round, its values joined by "/" ("-" for a
// label its nodes lack; label values hold neither): a one-level topology's
// domains are named by their value.
func (d Domain) name() string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = v
		if v == "" {
			parts[i] = "-"
		}
	}
	return strings.Join(parts, "/")
}

// selector: the requirements that admit exactly domain d's nodes: each
// of its labels In its value, or DoesNotExist where its nodes lack it.
func (d Domain) selector(labels []string) []*wire.SelectorRequirementT {
	var out []*wire.SelectorRequirementT
	for i, v := range d {
		key := labels[len(labels)-1-i]
		if v == "" {
			out = append(out, &wire.SelectorRequirementT{Key: key, Operator: wire.SelectorOperatorDoesNotExist})
		} else {
			out = append(out, &wire.SelectorRequirementT{Key: key, Operator: wire.SelectorOperatorIn, Values: []string{v}})
		}
	}
	return out
}

// Level is label's level in the round's topology (1 the coarsest label;
// 0: not a topology label).
func Level(labels []string, label string) int {
	for i, l := range labels {
		if l == label {
			return len(labels) - i
		}
	}
	return 0
}

// tree builds the round's topology from the nodes' domains.
type tree struct {
	labels []string
	wire   *wire.TopologyT
	index  map[string]int32     // a domain's index, by its values joined by "\x00"
	under  map[[2]string]Domain // a (label, value)'s first parent
}

func newTree(labels []string) *tree {
	names := []string{"cluster"}
	for i := len(labels) - 1; i >= 0; i-- {
		names = append(names, labels[i])
	}
	return &tree{labels: labels, index: map[string]int32{}, under: map[[2]string]Domain{},
		wire: &wire.TopologyT{LevelNames: names, Domains: []*wire.TopologyDomainT{{Name: "cluster", Level: 0, Parent: -1}}}}
}

// add: node n's lowest domain (-1: the cluster alone), its domains
// added as they are first seen.
func (t *tree) add(n *corev1.Node) int32 {
	d := DomainOf(n, t.labels)
	at := int32(-1)
	for i, v := range d {
		if v == "" {
			continue
		}
		key := strings.Join(d[:i+1], "\x00")
		got, ok := t.index[key]
		if !ok {
			got = int32(len(t.wire.Domains))
			t.index[key] = got
			t.wire.Domains = append(t.wire.Domains, &wire.TopologyDomainT{Name: d[:i+1].name(), Level: uint8(i + 1), Parent: max(at, 0)})
			if i == len(t.labels)-1 {
				t.seen(t.labels[0], v, d[:i].trim())
			}
		}
		at = got
	}
	return at
}

// seen: value v of the finest label under domain `under`. One value under
// two parents (a clique seen in two racks) is a domain under each, which
// is logged once a value (at most maxSplitLogged values a process): a
// gang is then held in one of them, where the label said it could span
// both. (A coarser level's value under two parents, a rack r1 in two
// zones, is only a name used twice.)
func (t *tree) seen(label, v string, under Domain) {
	k := [2]string{label, v}
	first, ok := t.under[k]
	if !ok {
		t.under[k] = under
		return
	}
	if first.name() == under.name() {
		return
	}
	splitMu.Lock()
	defer splitMu.Unlock()
	if splitLogged[k] || len(splitLogged) >= maxSplitLogged {
		return
	}
	splitLogged[k] = true
	slog.Warn(fmt.Sprintf("topology: nodes with %s=%s are under %s and under %s: a domain under each (a gang held in one domain is held in one of them)",
		label, v, first.where(), under.where()))
}

// where: "the cluster", or `domain "<name>"`.
func (d Domain) where() string {
	if len(d) == 0 {
		return "the cluster"
	}
	return fmt.Sprintf("domain %q", d.name())
}

var (
	splitMu     sync.Mutex
	splitLogged = map[[2]string]bool{}
)

const maxSplitLogged = 1000
