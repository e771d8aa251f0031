package dra_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"placer.local/kubernetes/internal/dra"
	"placer.local/kubernetes/internal/dratest"
)

func nvidiaClasses() dratest.ClassMap { return dratest.ClassLister() }

var (
	a100 = dratest.Products["NVIDIA-A100-SXM4-80GB"]
	h100 = dratest.Products["NVIDIA-H100-80GB-HBM3"]
)

// cluster: node-1 A100, node-2 H100, node-3 H100 with GPUs 6 and 7 in MIG mode.
func cluster() ([]*corev1.Node, []*resourceapi.ResourceSlice) {
	var nodes []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	for i, d := range []dratest.Node{
		{Name: "node-1", Product: a100, GPUs: 8},
		{Name: "node-2", Product: h100, GPUs: 8},
		{Name: "node-3", Product: h100, GPUs: 8, MIG: map[int][]dratest.MIG{6: dratest.SevenSmall, 7: dratest.Mixed}},
	} {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: d.Name, UID: types.UID(fmt.Sprint("n", i))}})
		slices = append(slices, d.Slice())
	}
	return nodes, slices
}

func claim(name, class string, count int64, cel string) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Count: count,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount}}
	if cel != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("claim-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}}}
}

func pod(name string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("pod-" + name)}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return p
}

func snapshot(t *testing.T, slices []*resourceapi.ResourceSlice, claims ...*resourceapi.ResourceClaim) *dra.Snapshot {
	t.Helper()
	return dra.NewSnapshot(dra.Input{Slices: slices, Classes: nvidiaClasses(), Claims: claims, GPUDriver: dratest.Driver})
}

func resolve(t *testing.T, s *dra.Snapshot, p *corev1.Pod) *dra.PodClaims {
	t.Helper()
	pc, why := s.Resolve(p)
	if pc == nil {
		t.Fatalf("resolve %s: %q", p.Name, why)
	}
	return pc
}

const h100Sel = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"

func TestFitByProductCapabilityAndMIG(t *testing.T) {
	nodes, slices := cluster()
	byProduct := claim("four-h100", "gpu.nvidia.com", 4, h100Sel)
	byCap := claim("cc9", "gpu.nvidia.com", 1, "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.9.0'))")
	mig := claim("small", "mig.nvidia.com", 1, "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
	seven := claim("seven", "gpu.nvidia.com", 7, h100Sel)
	nine := claim("nine", "gpu.nvidia.com", 9, "")                                                             // more than any node has (refused by the count)
	twoBig := claim("two-3g", "mig.nvidia.com", 2, "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'") // node-3 has one
	s := snapshot(t, slices, byProduct, byCap, mig, seven, nine, twoBig)
	v := s.View(nil)
	for _, tc := range []struct {
		claim      string
		want       []string // why per node
		gpus, mill uint16
	}{
		{"four-h100", []string{dra.CannotAllocate, "", ""}, 4, 1000},
		{"cc9", []string{dra.CannotAllocate, "", ""}, 1, 1000},
		{"small", []string{dra.CannotAllocate, dra.CannotAllocate, ""}, 1, 142},
		{"seven", []string{dra.CannotAllocate, "", dra.CannotAllocate}, 7, 1000}, // node-3 has six whole GPUs
		{"nine", []string{dra.CannotAllocate, dra.CannotAllocate, dra.CannotAllocate}, 0, 1000},
		{"two-3g", []string{dra.CannotAllocate, dra.CannotAllocate, dra.CannotAllocate}, 0, 1000},
	} {
		why, g, m, err := v.Fit(resolve(t, s, pod("p-"+tc.claim, tc.claim)), nodes)
		if err != "" {
			t.Fatalf("%s: %s", tc.claim, err)
		}
		for i, n := range nodes {
			if why[n.Name] != tc.want[i] {
				t.Errorf("%s on %s: %q, want %q", tc.claim, n.Name, why[n.Name], tc.want[i])
			}
		}
		if g != tc.gpus || m != tc.mill {
			t.Errorf("%s: demand %d x %d, want %d x %d", tc.claim, g, m, tc.gpus, tc.mill)
		}
	}
	free, product := v.GPUs("node-3")
	if product != h100.Name || fmt.Sprint(free) != "[1000 1000 1000 1000 1000 1000 999 999]" {
		t.Fatalf("node-3: %v %q", free, product)
	}
	// Take the MIG claim on the GPU Placer chose (6), the 4-GPU one on 4..7 of node-2.
	pa, why := v.Take(resolve(t, s, pod("p-small", "small")), nodes[2], []int{6})
	if why != "" || len(pa.Claims) != 1 || pa.Claims[0].Allocation == nil {
		t.Fatalf("take small: %q %+v", why, pa)
	}
	dev := pa.Claims[0].Allocation.Devices.Results[0].Device
	if !strings.HasPrefix(dev, "gpu-6-mig-19-") {
		t.Fatalf("the MIG device %s is not a 1g.10gb of GPU 6", dev)
	}
	free, _ = v.GPUs("node-3")
	if free[6] != 999-142 || free[7] != 999 {
		t.Fatalf("node-3 after a 1g.10gb on GPU 6: %v", free)
	}
	pa, why = v.Take(resolve(t, s, pod("p-four", "four-h100")), nodes[1], []int{4, 5, 6, 7})
	if why != "" {
		t.Fatal(why)
	}
	var got []string
	for _, r := range pa.Claims[0].Allocation.Devices.Results {
		got = append(got, r.Device)
	}
	if strings.Join(got, ",") != "gpu-4,gpu-5,gpu-6,gpu-7" {
		t.Fatalf("devices %v, want the GPUs Placer chose", got)
	}
	// A later round's view sees both allocations: node-2 has 4 free, so seven fit nowhere.
	v2 := s.View([]*dra.PodAlloc{pa})
	why2, _, _, _ := v2.Fit(resolve(t, s, pod("p-seven", "seven")), nodes)
	if why2["node-2"] != dra.CannotAllocate {
		t.Fatalf("seven GPUs on node-2 with four taken: %q", why2["node-2"])
	}
	if free, _ := v2.GPUs("node-2"); fmt.Sprint(free) != "[1000 1000 1000 1000 0 0 0 0]" {
		t.Fatalf("node-2: %v", free)
	}
}

func TestAllocatedClaimsHoldTheirDevicesAndNode(t *testing.T) {
	nodes, slices := cluster()
	// A claim allocated by another scheduler: all of node-2's GPUs.
	other := claim("other", "gpu.nvidia.com", 8, "")
	other.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-2"}}}}}}}
	for g := 0; g < 8; g++ {
		other.Status.Allocation.Devices.Results = append(other.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: dratest.Driver, Pool: "node-2", Device: fmt.Sprintf("gpu-%d", g)})
	}
	four := claim("four-h100", "gpu.nvidia.com", 4, h100Sel)
	shared := claim("shared", "gpu.nvidia.com", 1, "")
	s := snapshot(t, slices, other, four, shared)
	v := s.View(nil)
	why, _, _, _ := v.Fit(resolve(t, s, pod("a", "four-h100")), nodes)
	if why["node-2"] != dra.CannotAllocate || why["node-3"] != "" {
		t.Fatalf("node-2 is all allocated: %v", why)
	}
	// A pod of the allocated claim may go only where it is allocated.
	why, g, _, _ := v.Fit(resolve(t, s, pod("b", "other")), nodes)
	if why["node-1"] != dra.NotAvailable || why["node-2"] != "" || g != 0 {
		t.Fatalf("allocated claim: %v, %d GPUs", why, g)
	}
	// A shared claim is allocated once: the first pod allocates it, the
	// second is only reserved, on the same node.
	pa, w := v.Take(resolve(t, s, pod("c", "shared")), nodes[0], nil)
	if w != "" || pa.Claims[0].Allocation == nil {
		t.Fatalf("first: %q", w)
	}
	if _, w := v.Take(resolve(t, s, pod("d", "shared")), nodes[2], nil); w != dra.NotAvailable {
		t.Fatalf("second on another node: %q", w)
	}
	pb, w := v.Take(resolve(t, s, pod("d", "shared")), nodes[0], nil)
	if w != "" || pb.Claims[0].Allocation != nil {
		t.Fatalf("second on its node: %q, allocated again %v", w, pb.Claims[0].Allocation)
	}
	if free, _ := v.GPUs("node-1"); free[0]+free[1] != 1000 { // one GPU taken, once
		t.Fatalf("node-1: %v", free)
	}
}

func TestResolveAndCheckSayWhyInKubeSchedulersWords(t *testing.T) {
	_, slices := cluster()
	nope := claim("nope", "tpu.example.com", 1, "")
	deleting := claim("deleting", "gpu.nvidia.com", 1, "")
	deleting.DeletionTimestamp = &metav1.Time{}
	s := snapshot(t, slices, nope, deleting)
	if _, why := s.Resolve(pod("a", "missing")); why != `resourceclaim.resource.k8s.io "missing" not found` {
		t.Errorf("missing: %q", why)
	}
	if _, why := s.Resolve(pod("b", "deleting")); why != `resourceclaim "deleting" is being deleted` {
		t.Errorf("deleting: %q", why)
	}
	tmpl := pod("c")
	tmpl.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}}
	if _, why := s.Resolve(tmpl); why != `pod "ns/c": ResourceClaim not created yet` {
		t.Errorf("template: %q", why)
	}
	if why := s.View(nil).Check(resolve(t, s, pod("d", "nope"))); why != "request gpu: device class tpu.example.com does not exist" {
		t.Errorf("class: %q", why)
	}
	// A claim generated for another pod is not this pod's.
	gen := claim("c-gpu-x", "gpu.nvidia.com", 1, "")
	gen.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "other", UID: "other", Controller: ptr.To(true)}}
	s = snapshot(t, slices, gen)
	tmpl.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("c-gpu-x")}}
	if _, why := s.Resolve(tmpl); !strings.Contains(why, "was not created for Pod ns/c") {
		t.Errorf("not the pod's: %q", why)
	}
}

func TestMIGShare(t *testing.T) {
	for p, want := range map[string]uint16{"1g.10gb": 142, "2g.20gb": 285, "3g.40gb": 428, "7g.80gb": 1000, "odd": 142} {
		if got := dra.MIGShare(p); got != want {
			t.Errorf("%s: %d, want %d", p, got, want)
		}
	}
}

// BenchmarkFit64Nodes: where claims can be allocated on 64 nodes of 8
// GPUs (every 8th with two GPUs in MIG mode), for claims that fit and
// claims that fit nowhere (nine GPUs: refused by the count, without the
// allocator's search, which backtracks in factorial time).
func BenchmarkFit64Nodes(b *testing.B) {
	var nodes []*corev1.Node
	var slices []*resourceapi.ResourceSlice
	for i := 0; i < 64; i++ {
		d := dratest.Node{Name: fmt.Sprint("node-", i), Product: h100, GPUs: 8}
		if i%8 == 7 {
			d.MIG = map[int][]dratest.MIG{6: dratest.SevenSmall, 7: dratest.Mixed}
		}
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: d.Name, UID: types.UID(fmt.Sprint("n", i))}})
		slices = append(slices, d.Slice())
	}
	for _, c := range []*resourceapi.ResourceClaim{claim("one", "gpu.nvidia.com", 1, h100Sel), claim("eight", "gpu.nvidia.com", 8, h100Sel),
		claim("mig", "mig.nvidia.com", 1, ""), claim("nine", "gpu.nvidia.com", 9, ""),
		claim("b200", "gpu.nvidia.com", 1, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'")} {
		b.Run(c.Name, func(b *testing.B) {
			s := dra.NewSnapshot(dra.Input{Slices: slices, Classes: nvidiaClasses(), Claims: []*resourceapi.ResourceClaim{c}, GPUDriver: dratest.Driver})
			pc, _ := s.Resolve(pod("p", c.Name))
			for b.Loop() {
				if _, _, _, err := s.View(nil).Fit(pc, nodes); err != "" {
					b.Fatal(err)
				}
			}
		})
	}
}
