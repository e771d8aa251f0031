package translate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/dratest"
	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// Pods with claims: the GPU driver's devices are the nodes' GPUs (no
// nvidia.com/gpu allocatable), a claim's allocation the job's demand
// (whole GPUs, a MIG share), the nodes where it cannot be allocated
// excluded in kube-scheduler's words; Take allocates on the GPUs Placer
// chose.
func TestClaimsAreJobRequirements(t *testing.T) {
	products := []dratest.Product{dratest.Products["NVIDIA-A100-SXM4-80GB"], dratest.Products["NVIDIA-H100-80GB-HBM3"], dratest.Products["NVIDIA-H100-80GB-HBM3"]}
	var nodes []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	for i, p := range products {
		n := node(fmt.Sprint("n", i+1), "r1", 0)
		delete(n.Labels, GPUProduct)
		nodes = append(nodes, n)
		d := dratest.Node{Name: n.Name, Product: p, GPUs: 8}
		if i == 2 {
			d.MIG = map[int][]dratest.MIG{7: dratest.SevenSmall}
		}
		slices = append(slices, d.Slice())
	}
	classes := dratest.ClassLister()
	var claims []*resourceapi.ResourceClaim
	mk := func(name string, w dratest.Want) *corev1.Pod {
		claims = append(claims, &resourceapi.ResourceClaim{ObjectMeta: metaNS(name), Spec: w.Spec()})
		p := pod(name, 0, "1")
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
		return p
	}
	four, mig, nine := mk("four", dratest.WantH100x4), mk("mig", dratest.WantMIG), mk("nine", dratest.WantNine)
	ds := dra.NewSnapshot(dra.Input{Slices: slices, Classes: classes, Claims: claims, GPUDriver: dratest.Driver})
	r := build(nodes, nil, []*corev1.Pod{four, mig, nine}, Options{DRA: ds})
	if got := r.Request.Cluster.Nodes; got[0].GpuModel != dratest.A100Name || len(got[2].GpuFreeMilli) != 8 || got[2].GpuFreeMilli[7] != 999 {
		t.Fatalf("nodes: %q %v", got[0].GpuModel, got[2].GpuFreeMilli)
	}
	if len(r.Request.Pending) != 3 || len(r.Skipped) != 0 {
		t.Fatalf("%d jobs, skipped %+v", len(r.Request.Pending), r.Skipped)
	}
	// nine: every node excluded, said as kube-scheduler says it once Placer has not placed it
	if e := r.Request.Pending[2].Constraints.Required[0].MatchExpressions; len(e) != 1 || strings.Join(e[0].Values, ",") != "n1,n2,n3" {
		t.Errorf("nine: required %+v", e)
	}
	if got := r.Explain(2, &wire.UnplacedT{Reason: wire.UnplacedReasonNoFeasibleNode, Nodes: 3, Excluded: []*wire.ExclusionCountT{{Reason: wire.NodeExclusionAffinity, Nodes: 3}}}); got != "0/3 nodes are available: 3 cannot allocate all claims." {
		t.Errorf("nine: %q", got)
	}
	j := r.Request.Pending[0]
	if j.Demand.Gpus != 4 || j.Demand.GpuMilli != 1000 {
		t.Errorf("four: demand %+v", j.Demand)
	}
	if e := j.Constraints.Required[0].MatchExpressions; len(e) != 1 || e[0].Key != NodeLabel || strings.Join(e[0].Values, ",") != "n1" {
		t.Errorf("four: required %+v", e)
	}
	if d := r.Request.Pending[1].Demand; d.Gpus != 1 || d.GpuMilli != 142 {
		t.Errorf("mig: demand %+v", d)
	}
	// Placed on n2's GPUs 4..7 and n3's GPU 7: allocated there.
	if why := r.C.Take(four, 1, []uint8{4, 5, 6, 7}); why != "" {
		t.Fatal(why)
	}
	var got []string
	for _, x := range r.C.Claimed(four).Claims[0].Allocation.Devices.Results {
		got = append(got, x.Device)
	}
	if strings.Join(got, ",") != "gpu-4,gpu-5,gpu-6,gpu-7" {
		t.Errorf("four on n2: %v", got)
	}
	if why := r.C.Take(mig, 2, []uint8{7}); why != "" || !strings.HasPrefix(r.C.Claimed(mig).Claims[0].Allocation.Devices.Results[0].Device, "gpu-7-mig-") {
		t.Errorf("mig on n3: %q %+v", why, r.C.Claimed(mig))
	}
	if r.C.Claimed(nine) != nil {
		t.Errorf("nine claimed")
	}
}

func metaNS(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("claim-" + name)}
}

// More nodes excluded than a requirement lists: a label of the round's own.
func TestExcludeManyNodesByALabel(t *testing.T) {
	var nodes []*corev1.Node
	var names []string
	for i := 0; i < 100; i++ {
		nodes = append(nodes, node(fmt.Sprintf("n%03d", i), "r1", 8))
		if i < 70 {
			names = append(names, nodes[i].Name)
		}
	}
	c := NewCluster(nodes, nil, Options{})
	if e := c.exclude(names[:3]); e.Operator != wire.SelectorOperatorNotIn || len(e.Values) != 3 {
		t.Fatalf("three: %+v", e)
	}
	e := c.exclude(names)
	if e.Operator != wire.SelectorOperatorDoesNotExist || len(e.Values) != 0 || c.exclude(names).Key != e.Key {
		t.Fatalf("seventy: %+v", e)
	}
	for i, n := range nodes {
		has := slices.Contains(c.Wire[i].Labels, e.Key+"=true")
		if has != (i < 70) || c.matches(n, e) != (i >= 70) {
			t.Errorf("%s: label %v, admitted %v", n.Name, has, c.matches(n, e))
		}
	}
}
