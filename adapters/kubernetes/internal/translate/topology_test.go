package translate

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

const (
	cliqueKey = "nvidia.com/gpu.clique"
	rackKey   = "placer.io/rack"
	zoneKey   = "topology.kubernetes.io/zone"
)

var threeLevels = []string{cliqueKey, rackKey, zoneKey}

// at: a node of 8 GPUs with these topology labels (zone, rack, clique; "": none).
func at(name, zone, rack, clique string) *corev1.Node {
	n := node(name, "", 8)
	n.Labels = map[string]string{HostnameKey: name, GPUProduct: "H100"}
	for k, v := range map[string]string{zoneKey: zone, rackKey: rack, cliqueKey: clique} {
		if v != "" {
			n.Labels[k] = v
		}
	}
	return n
}

// domains: the round's topology as "name@level<parent" a domain, and each node's domain by name ("" for none).
func domains(c *Cluster) ([]string, map[string]string) {
	var ds []string
	nodes := map[string]string{}
	if c.Topo == nil {
		return nil, nodes
	}
	for _, d := range c.Topo.Domains {
		parent := ""
		if d.Parent >= 0 {
			parent = c.Topo.Domains[d.Parent].Name
		}
		ds = append(ds, fmt.Sprintf("%s@%d<%s", d.Name, d.Level, parent))
	}
	for i, n := range c.Wire {
		if n.Domain >= 0 {
			nodes[c.Nodes[i].Name] = c.Topo.Domains[n.Domain].Name
		}
	}
	return ds, nodes
}

// The topology tree from the nodes' labels: coarsest level first; a rack
// of one name in two zones is two racks; a clique seen under two racks is
// a domain under each; a node lacking a finer label sits in the deepest
// domain it has, one lacking a coarser one under the domain above; one
// label alone is today's racks under the cluster.
func TestTopologyTreeFromLabels(t *testing.T) {
	mixed := []*corev1.Node{
		at("a", "z1", "r1", "c1"), at("b", "z1", "r1", "c1"), at("c", "z1", "r1", "c2"), at("d", "z1", "r2", ""),
		at("e", "z2", "r1", "c3"), at("f", "z2", "r1", "c1"), at("g", "", "", ""), at("h", "z2", "", ""), at("i", "", "r9", "c9"),
	}
	for _, tc := range []struct {
		name      string
		labels    []string
		nodes     []*corev1.Node
		levels    []string
		domains   []string
		nodeAt    map[string]string
		noTopoNow bool
	}{
		{name: "clique, rack, zone", labels: threeLevels, nodes: mixed,
			levels: []string{"cluster", zoneKey, rackKey, cliqueKey},
			domains: []string{"cluster@0<", "z1@1<cluster", "z1/r1@2<z1", "z1/r1/c1@3<z1/r1", "z1/r1/c2@3<z1/r1", "z1/r2@2<z1",
				"z2@1<cluster", "z2/r1@2<z2", "z2/r1/c3@3<z2/r1", "z2/r1/c1@3<z2/r1", "-/r9@2<cluster", "-/r9/c9@3<-/r9"},
			nodeAt: map[string]string{"a": "z1/r1/c1", "b": "z1/r1/c1", "c": "z1/r1/c2", "d": "z1/r2", "e": "z2/r1/c3",
				"f": "z2/r1/c1", "h": "z2", "i": "-/r9/c9"}},
		{name: "the rack alone, as before", labels: []string{rackKey}, nodes: []*corev1.Node{node("n1", "r2", 8), node("n2", "r1", 8), node("n3", "r2", 8), node("n4", "", 8)},
			levels:  []string{"cluster", rackKey},
			domains: []string{"cluster@0<", "r2@1<cluster", "r1@1<cluster"},
			nodeAt:  map[string]string{"n1": "r2", "n2": "r1", "n3": "r2"}},
		{name: "rack and zone, no cliques", labels: []string{cliqueKey, rackKey, zoneKey}, nodes: []*corev1.Node{node("n1", "r1", 8), node("n2", "r2", 8)},
			levels:  []string{"cluster", zoneKey, rackKey, cliqueKey},
			domains: []string{"cluster@0<", "zone-r1@1<cluster", "zone-r1/r1@2<zone-r1", "zone-r2@1<cluster", "zone-r2/r2@2<zone-r2"},
			nodeAt:  map[string]string{"n1": "zone-r1/r1", "n2": "zone-r2/r2"}},
		{name: "no node has a label", labels: threeLevels, nodes: []*corev1.Node{at("a", "", "", "")}, noTopoNow: true, nodeAt: map[string]string{}},
		{name: "no labels", nodes: mixed, noTopoNow: true, nodeAt: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(tc.nodes, nil, Options{TopologyLabels: tc.labels})
			if tc.noTopoNow != (c.Topo == nil) {
				t.Fatalf("topology %+v", c.Topo)
			}
			ds, nodeAt := domains(c)
			if c.Topo != nil && strings.Join(c.Topo.LevelNames, " ") != strings.Join(tc.levels, " ") {
				t.Errorf("levels %v, want %v", c.Topo.LevelNames, tc.levels)
			}
			if strings.Join(ds, " ") != strings.Join(tc.domains, " ") {
				t.Errorf("domains\n %v, want\n %v", ds, tc.domains)
			}
			if fmt.Sprint(nodeAt) != fmt.Sprint(tc.nodeAt) {
				t.Errorf("nodes' domains %v, want %v", nodeAt, tc.nodeAt)
			}
		})
	}
}

func TestCommonDomain(t *testing.T) {
	for _, tc := range []struct {
		in   []Domain
		want string
	}{
		{nil, "[]"},
		{[]Domain{{"z1", "r1", "c1"}}, "[z1 r1 c1]"},
		{[]Domain{{"z1", "r1", "c1"}, {"z1", "r1", "c1"}}, "[z1 r1 c1]"},
		{[]Domain{{"z1", "r1", "c1"}, {"z1", "r1", "c2"}}, "[z1 r1]"},
		{[]Domain{{"z1", "r1", "c1"}, {"z1", "r2"}}, "[z1]"},
		{[]Domain{{"z1", "", "c1"}, {"z1", "", "c2"}}, "[z1]"},
		{[]Domain{{"z1", "r1"}, {"z2", "r1"}}, "[]"},
		{[]Domain{{"z1", "r1"}, nil}, "[]"},
	} {
		if got := fmt.Sprint(Common(tc.in)); got != tc.want {
			t.Errorf("Common(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func exprs(es []*wire.SelectorRequirementT) string {
	var out []string
	for _, e := range es {
		s := e.Key + " " + wire.EnumNamesSelectorOperator[e.Operator]
		if len(e.Values) > 0 {
			s += fmt.Sprint(e.Values)
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// A gang asks for one domain of the finest level (Placer then takes the
// deepest domain that holds it: a clique, else a rack, else a zone); a
// required level is that level, required; the rest of a gang placed in a
// domain is required in its domain of the required level and prefers
// each of its domains, the finest counting most.
func TestGangJobsAskForTheirDomain(t *testing.T) {
	mixed := []*corev1.Node{at("a", "z1", "r1", "c1"), at("b", "z1", "r2", "c2"), at("i", "", "r9", "c9")}
	for _, tc := range []struct {
		name      string
		labels    []string
		nodes     []*corev1.Node
		unit      Unit
		level     int8
		mode      wire.TopologyMode
		required  string
		preferred []string
		why       string
	}{
		{name: "a gang, three levels", labels: threeLevels, nodes: mixed, unit: Unit{Gang: true, Local: true},
			level: 3, mode: wire.TopologyModePreferred},
		{name: "a gang, the rack alone", labels: []string{rackKey}, nodes: mixed, unit: Unit{Gang: true, Local: true},
			level: 1, mode: wire.TopologyModePreferred},
		{name: "a gang, no topology", nodes: mixed, unit: Unit{Gang: true, Local: true}, level: -1},
		{name: "the rest of a gang in one clique", labels: threeLevels, nodes: mixed, unit: Unit{Gang: true, Local: true, Domain: Domain{"z1", "r1", "c1"}},
			level: 3, mode: wire.TopologyModePreferred,
			preferred: []string{zoneKey + " In[z1]", zoneKey + " In[z1], " + rackKey + " In[r1]",
				zoneKey + " In[z1], " + rackKey + " In[r1], " + cliqueKey + " In[c1]"}},
		{name: "one rack required, the rest of a gang", labels: threeLevels, nodes: mixed,
			unit:  Unit{Gang: true, Local: true, Within: rackKey, Domain: Domain{"z1", "r1", "c1"}},
			level: 2, mode: wire.TopologyModeRequired, required: zoneKey + " In[z1], " + rackKey + " In[r1]",
			preferred: []string{zoneKey + " In[z1], " + rackKey + " In[r1], " + cliqueKey + " In[c1]"}},
		{name: "one rack required, the rest of a gang on nodes of no zone", labels: threeLevels, nodes: mixed,
			unit:  Unit{Gang: true, Within: rackKey, Domain: Domain{"", "r9", "c9"}},
			level: 2, mode: wire.TopologyModeRequired, required: zoneKey + " DoesNotExist, " + rackKey + " In[r9]",
			preferred: []string{zoneKey + " DoesNotExist, " + rackKey + " In[r9], " + cliqueKey + " In[c9]"}},
		{name: "one clique required", labels: threeLevels, nodes: mixed, unit: Unit{Gang: true, Within: cliqueKey},
			level: 3, mode: wire.TopologyModeRequired},
		{name: "the rack alone: its rack required, as before", labels: []string{rackKey}, nodes: mixed,
			unit: Unit{Gang: true, Within: rackKey, Domain: Domain{"r1"}}, level: 1, mode: wire.TopologyModeRequired, required: rackKey + " In[r1]"},
		{name: "a required level of no node", labels: []string{rackKey}, nodes: []*corev1.Node{at("x", "z1", "", "")}, unit: Unit{Gang: true, Within: rackKey},
			why: `cannot express: one domain of "placer.io/rack" required, and no node has that label`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.unit
			u.Key, u.Pods = "g", []*corev1.Pod{pod("p0", 8, "1"), pod("p1", 8, "1")}
			r := Build(NewCluster(tc.nodes, nil, Options{TopologyLabels: tc.labels}), []*Unit{&u}, 1)
			if tc.why != "" {
				if len(r.Skipped) != 1 || r.Skipped[0].Why != tc.why {
					t.Fatalf("skipped %+v, want %q", r.Skipped, tc.why)
				}
				return
			}
			if len(r.Request.Pending) != 1 {
				t.Fatalf("skipped %+v", r.Skipped)
			}
			j := r.Request.Pending[0]
			if j.TopologyLevel != tc.level || j.TopologyMode != tc.mode {
				t.Errorf("level %d %v, want %d %v", j.TopologyLevel, j.TopologyMode, tc.level, tc.mode)
			}
			required := ""
			if len(j.Constraints.Required) > 0 {
				required = exprs(j.Constraints.Required[0].MatchExpressions)
			}
			var preferred []string
			for _, p := range j.Constraints.Preferred {
				if p.Weight != 100 {
					t.Errorf("weight %d", p.Weight)
				}
				preferred = append(preferred, exprs(p.Preference.MatchExpressions))
			}
			if required != tc.required || fmt.Sprintf("%q", preferred) != fmt.Sprintf("%q", tc.preferred) {
				t.Errorf("required %q, preferred %q\nwant %q, %q", required, preferred, tc.required, tc.preferred)
			}
		})
	}
}

// A clique seen under two racks is logged once (a rack name used in two
// zones is not logged).
func TestCliqueUnderTwoRacksLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	c := fmt.Sprintf("c%d", time.Now().UnixNano()) // logged once a process: a value of this run's own
	nodes := []*corev1.Node{at("a", "z1", "r1", c), at("b", "z1", "r2", c), at("c", "z2", "r1", "other")}
	for i := 0; i < 2; i++ {
		NewCluster(nodes, nil, Options{TopologyLabels: threeLevels})
	}
	want := fmt.Sprintf(`nodes with nvidia.com/gpu.clique=%s are under domain \"z1/r1\" and under domain \"z1/r2\"`, c)
	if got := buf.String(); strings.Count(got, want) != 1 || strings.Count(got, "WARN") != 1 {
		t.Errorf("logged %q, want once %q", got, want)
	}
}
