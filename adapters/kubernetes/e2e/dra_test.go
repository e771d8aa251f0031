package e2e

// Issue 55: pods' ResourceClaims allocated by the Placer scheduler
// through Kubernetes' structured allocator, on nodes whose GPUs are
// devices of ResourceSlices in NVIDIA's model (internal/dratest: the test
// driver, for 64 nodes of 8 GPUs, A100 and H100, every 8th node's last two
// GPUs in MIG mode), with kube-controller-manager's resourceclaim
// controller making the claims of templates and freeing unused ones.
//
// Each test checks every allocation independently (checkClaims): the
// claim allocated and reserved for its pod, the pod bound to the node of
// the allocation, each device a device of that node's slice, meeting what
// the test asked of it (product, capability, MIG profile, count), and no
// device given twice.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"placer.local/kubernetes/internal/dratest"
)

// the resourceclaim controller: claims from templates, unused claims freed
const claimController = "resourceclaim-controller"

type want = dratest.Want

var (
	wantH100x4, wantH100x8, wantCC9, wantA100 = dratest.WantH100x4, dratest.WantH100x8, dratest.WantCC9, dratest.WantA100
	wantMIG, wantMIG3g                        = dratest.WantMIG, dratest.WantMIG3g
)

func newDRACluster(t *testing.T, nodes int) *cluster { return newClusterWith(t, draCluster(nodes)) }

// draCluster: a control plane of `nodes` nodes whose GPUs are devices,
// every eighth node's last two in MIG mode, with the resourceclaim
// controller.
func draCluster(nodes int) clusterOpts {
	return clusterOpts{nodes: nodes, controllers: claimController, dra: true, migEvery: 8}
}

// publishSlices: the test driver's ResourceSlices for every node, and
// NVIDIA's DeviceClasses.
func (c *cluster) publishSlices(migEvery int) {
	if err := dratest.PublishNodes(context.Background(), c.cs, 8, migEvery); err != nil {
		c.t.Fatal(err)
	}
}

// template: a ResourceClaimTemplate of one request.
func (c *cluster) template(ns, name string, w want) {
	c.ensureNamespace(ns)
	_, err := c.cs.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: w.Spec()},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
}

// claim: a ResourceClaim of one request (shared by the pods naming it).
func (c *cluster) claim(ns, name string, w want) {
	c.ensureNamespace(ns)
	_, err := c.cs.ResourceV1().ResourceClaims(ns).Create(context.Background(), &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       w.Spec(),
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) ensureNamespace(ns string) {
	_, err := c.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		c.t.Fatal(err)
	}
}

// claimPod: a pod of podSpec s whose GPUs are claim `gpu`: from template
// tmpl, or, with shared, the ResourceClaim of that name.
func (c *cluster) claimPod(ns string, s podSpec, tmpl string, shared bool) *corev1.Pod {
	s.gpus = 0
	p := c.buildPod(ns, s)
	pc := corev1.PodResourceClaim{Name: "gpu"}
	if shared {
		pc.ResourceClaimName = &tmpl
	} else {
		pc.ResourceClaimTemplateName = &tmpl
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{pc}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return p
}

// devices: every device of the slices, by driver/pool/device, with its node.
type devInfo struct {
	node  string
	attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

func (c *cluster) devices() map[string]devInfo {
	l, err := c.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]devInfo{}
	for _, sl := range l.Items {
		for _, d := range sl.Spec.Devices {
			out[sl.Spec.Driver+"/"+sl.Spec.Pool.Name+"/"+d.Name] = devInfo{node: *sl.Spec.NodeName, attrs: d.Attributes}
		}
	}
	return out
}

// podClaimName: the name of pod p's claim `gpu` (generated from its template, or named).
func podClaimName(p *corev1.Pod) string {
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			return *pc.ResourceClaimName
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				return *st.ResourceClaimName
			}
		}
	}
	return ""
}

// checkClaims: every bound pod of ns with a claim, not finished, against `wants` (by
// the pod's template or claim name): its claim allocated with the
// scheduler's finalizer and reserved for it; the pod on the allocation's
// node; each device of that node, meeting the want, as many as it asks;
// and no device in two allocated claims of the whole cluster. Returns the
// claims allocated, by pod.
func (c *cluster) checkClaims(ns string, wants map[string]want) map[string]*resourceapi.ResourceClaim {
	ctx := context.Background()
	devs := c.devices()
	all, err := c.cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	owner := map[string]string{}
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range all.Items {
		cl := &all.Items[i]
		byName[cl.Namespace+"/"+cl.Name] = cl
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			id := r.Driver + "/" + r.Pool + "/" + r.Device
			if o, dup := owner[id]; dup {
				c.t.Errorf("device %s allocated to claims %s and %s/%s", id, o, cl.Namespace, cl.Name)
			}
			owner[id] = cl.Namespace + "/" + cl.Name
		}
	}
	out := map[string]*resourceapi.ResourceClaim{}
	for _, p := range c.pods(ns) {
		if p.Spec.NodeName == "" || len(p.Spec.ResourceClaims) == 0 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // (a finished pod's claim is freed)
		}
		src := p.Spec.ResourceClaims[0].ResourceClaimTemplateName
		if src == nil {
			src = p.Spec.ResourceClaims[0].ResourceClaimName
		}
		w, ok := wants[*src]
		if !ok {
			c.t.Fatalf("pod %s: no want for %s", p.Name, *src)
		}
		cl := byName[ns+"/"+podClaimName(&p)]
		switch {
		case cl == nil:
			c.t.Errorf("pod %s bound to %s: its claim %q not found", p.Name, p.Spec.NodeName, podClaimName(&p))
			continue
		case cl.Status.Allocation == nil:
			c.t.Errorf("pod %s bound to %s: claim %s not allocated (status %+v)", p.Name, p.Spec.NodeName, cl.Name, cl.Status)
			continue
		case !slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID }):
			c.t.Errorf("pod %s: claim %s not reserved for it (%v)", p.Name, cl.Name, cl.Status.ReservedFor)
		case !slices.Contains(cl.Finalizers, resourceapi.Finalizer):
			c.t.Errorf("claim %s: no finalizer %s", cl.Name, resourceapi.Finalizer)
		}
		out[p.Name] = cl
		if sel := cl.Status.Allocation.NodeSelector; sel == nil || !nodeSelectorNames(sel, p.Spec.NodeName) {
			c.t.Errorf("pod %s on %s: its claim's allocation is for %v", p.Name, p.Spec.NodeName, cl.Status.Allocation.NodeSelector)
		}
		if n := int64(len(cl.Status.Allocation.Devices.Results)); n != w.Count {
			c.t.Errorf("pod %s: %d devices allocated, it asked %d", p.Name, n, w.Count)
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			d, ok := devs[r.Driver+"/"+r.Pool+"/"+r.Device]
			switch {
			case !ok:
				c.t.Errorf("pod %s: device %s/%s/%s is in no slice", p.Name, r.Driver, r.Pool, r.Device)
			case d.node != p.Spec.NodeName:
				c.t.Errorf("pod %s on %s: device %s is on %s", p.Name, p.Spec.NodeName, r.Device, d.node)
			case !w.OK(d.attrs):
				c.t.Errorf("pod %s: device %s on %s is not %s (%s, %s, %s)", p.Name, r.Device, d.node, w.Describe,
					dratest.AttrString(d.attrs, "type"), dratest.AttrString(d.attrs, "productName"), dratest.AttrString(d.attrs, "profile"))
			}
		}
	}
	return out
}

// nodeSelectorNames: whether sel (an allocation's: metadata.name In [...]) admits node.
func nodeSelectorNames(sel *corev1.NodeSelector, node string) bool {
	for _, t := range sel.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && slices.Contains(f.Values, node) {
				return true
			}
		}
	}
	return false
}

// checkRecorded: each bound pod of ns bound where Placer chose (--record).
func (c *cluster) checkRecorded(ns string) {
	rec := c.recorded()
	for _, p := range c.pods(ns) {
		if p.Spec.NodeName == "" {
			continue
		}
		if r := rec[ns+"/"+p.Name]; len(r) == 0 || r[len(r)-1] != p.Spec.NodeName {
			c.t.Errorf("pod %s bound to %s, Placer chose %v", p.Name, p.Spec.NodeName, r)
		}
	}
}

// A 4-GPU claim by product, claims by compute capability and by product
// for one GPU, and MIG claims (1g.10gb and 3g.40gb), all from templates
// the resourceclaim controller turns into claims: every pod bound where
// Placer chose, with a valid allocation.
func TestDRAClaimsByProductCapabilityAndMIG(t *testing.T) {
	c := newDRACluster(t, 64)
	ns := "dra"
	wants := map[string]want{"four-h100": wantH100x4, "cc9": wantCC9, "one-a100": wantA100, "mig-small": wantMIG, "mig-3g": wantMIG3g}
	for name, w := range wants {
		c.template(ns, name, w)
	}
	var pods []*corev1.Pod
	add := func(n int, tmpl string) {
		for i := 0; i < n; i++ {
			pods = append(pods, c.claimPod(ns, podSpec{name: fmt.Sprintf("%s-%d", tmpl, i)}, tmpl, false))
		}
	}
	add(16, "four-h100")
	add(8, "cc9")
	add(8, "one-a100")
	add(20, "mig-small")
	add(4, "mig-3g")
	c.startScheduler()
	c.create(ns, pods...)
	c.waitBound(ns, 120*time.Second)
	got := c.checkClaims(ns, wants)
	if len(got) != len(pods) {
		t.Errorf("%d pods with an allocated claim, want %d", len(got), len(pods))
	}
	c.checkRecorded(ns)
	c.checkCapacity()
}

// A gang of four claim-bearing pods (coscheduling's label, minMember 4),
// each claiming 8 H100 GPUs from a template: all four bound at once, in
// one rack, each on a node of its own.
func TestDRAGangOfClaimsInOneRack(t *testing.T) {
	c := newDRACluster(t, 64)
	ns := "dra-gang"
	c.template(ns, "eight-h100", wantH100x8)
	var pods []*corev1.Pod
	for i := 0; i < 4; i++ {
		pods = append(pods, c.claimPod(ns, podSpec{name: fmt.Sprintf("train-%d", i), group: "train", minMember: 4}, "eight-h100", false))
	}
	c.create(ns, pods[:3]...)
	c.startScheduler()
	// Three of four: the gang waits, saying so; no claim allocated.
	c.waitCondition(ns, "train-0", "Unschedulable", "waiting for pod group", 30*time.Second)
	cl, err := c.cs.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range cl.Items {
		if x.Status.Allocation != nil || len(x.Status.ReservedFor) > 0 {
			t.Fatalf("claim %s allocated for a gang short of its minMember: %+v", x.Name, x.Status)
		}
	}
	c.create(ns, pods[3])
	ps := c.waitBound(ns, 60*time.Second)
	got := c.checkClaims(ns, map[string]want{"eight-h100": wantH100x8})
	if len(got) != 4 {
		t.Fatalf("%d of the gang's claims allocated", len(got))
	}
	labels := nodeLabels(c)
	racks, nodes := map[string]bool{}, map[string]bool{}
	for _, p := range ps {
		racks[labels[p.Spec.NodeName]["placer.io/rack"]] = true
		nodes[p.Spec.NodeName] = true
		if labels[p.Spec.NodeName]["nvidia.com/gpu.product"] != h100 {
			t.Errorf("%s on %s, not an H100 node", p.Name, p.Spec.NodeName)
		}
	}
	if len(racks) != 1 || len(nodes) != 4 {
		t.Errorf("the gang on %d racks and %d nodes, want 1 and 4: %v", len(racks), len(nodes), nodes)
	}
	c.checkRecorded(ns)
}

// Claims no node can meet (nine GPUs of one node, a product there is
// none of, a device class that does not exist) leave their pods pending,
// in kube-scheduler's words; their claims stay unallocated. Judged by
// kube-scheduler.
func TestDRAUnmeetableClaim(t *testing.T) {
	judgedWith(t, draCluster(64), unmeetableClaim)
}

func unmeetableClaim(c *cluster) {
	t := c.t
	ns := "dra-unmeetable"
	nine := dratest.WantNine
	b200 := want{Class: "gpu.nvidia.com", Count: 1, CEL: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}
	noClass := want{Class: "tpu.example.com", Count: 1}
	c.template(ns, "nine", nine)
	c.template(ns, "b200", b200)
	c.template(ns, "no-class", noClass)
	c.template(ns, "one-a100", wantA100)
	c.startJudged()
	c.create(ns, c.claimPod(ns, podSpec{name: "nine"}, "nine", false), c.claimPod(ns, podSpec{name: "b200"}, "b200", false),
		c.claimPod(ns, podSpec{name: "no-class"}, "no-class", false), c.claimPod(ns, podSpec{name: "fits"}, "one-a100", false))
	c.waitBound(ns, 60*time.Second, "nine", "b200", "no-class")
	for _, tc := range []struct{ pod, msg string }{
		{"nine", "0/64 nodes are available: 64 cannot allocate all claims."},
		{"b200", "0/64 nodes are available: 64 cannot allocate all claims."},
		{"no-class", "0/64 nodes are available: request gpu: device class tpu.example.com does not exist."},
	} {
		// (kube-scheduler adds its preemption clause)
		if got := c.waitCondition(ns, tc.pod, "Unschedulable", "nodes are available", 30*time.Second); !strings.HasPrefix(got, tc.msg) {
			t.Errorf("%s: %q, want %q", tc.pod, got, tc.msg)
		}
	}
	for _, p := range c.pods(ns) {
		if p.Name == "fits" {
			continue
		}
		cl, err := c.cs.ResourceV1().ResourceClaims(ns).Get(context.Background(), podClaimName(&p), metav1.GetOptions{})
		if err != nil || cl.Status.Allocation != nil || len(cl.Status.ReservedFor) > 0 {
			t.Errorf("%s: its claim %v: allocated %v, reserved %v", p.Name, err, cl.Status.Allocation != nil, cl.Status.ReservedFor)
		}
	}
	c.checkClaims(ns, map[string]want{"one-a100": wantA100})
}

// A ResourceClaim shared by pods (each naming it) is allocated once: the
// pods bound to the one node of its devices, all in its reservedFor, one
// created once the others were bound too. A pod that needs all of that
// node's GPUs waits, in kube-scheduler's words; once the sharing pods
// have finished, the resourceclaim controller frees the claim, its
// devices go back to the pool, and that pod is bound there. Judged by
// kube-scheduler.
func TestDRASharedClaim(t *testing.T) {
	judgedWith(t, clusterOpts{nodes: 2, controllers: claimController, dra: true, models: "h100"}, sharedClaim)
}

func sharedClaim(c *cluster) {
	t := c.t
	ns := "dra-shared"
	c.claim(ns, "shared", wantCC9)
	c.template(ns, "eight-h100", wantH100x8)
	k := c.startKubelet(ns)
	c.startJudged()
	var pods []*corev1.Pod
	for i := 0; i < 3; i++ {
		pods = append(pods, c.claimPod(ns, podSpec{name: fmt.Sprintf("share-%d", i)}, "shared", true))
	}
	c.create(ns, pods...)
	c.waitBound(ns, 60*time.Second)
	c.create(ns, c.claimPod(ns, podSpec{name: "share-late"}, "shared", true))
	ps := c.waitBound(ns, 60*time.Second)
	got := c.checkClaims(ns, map[string]want{"shared": wantCC9})
	cl := got["share-0"]
	if len(got) != 4 || cl == nil || len(cl.Status.ReservedFor) != 4 {
		t.Fatalf("shared claim: %d pods with it allocated; reserved for %v", len(got), cl)
	}
	node := ps[0].Spec.NodeName
	for _, p := range ps {
		if p.Spec.NodeName != node {
			t.Errorf("%s on %s, the shared claim's pods on %s", p.Name, p.Spec.NodeName, node)
		}
	}
	other := map[string]string{"node-1": "node-2", "node-2": "node-1"}[node]
	c.create(ns, c.claimPod(ns, podSpec{name: "filler", hosts: []string{other}}, "eight-h100", false))
	c.waitBound(ns, 60*time.Second)
	c.create(ns, c.claimPod(ns, podSpec{name: "big"}, "eight-h100", false))
	if msg := c.waitCondition(ns, "big", "Unschedulable", "nodes are available", 30*time.Second); !strings.HasPrefix(msg, "0/2 nodes are available: 2 cannot allocate all claims.") {
		t.Errorf("big, while the shared claim holds two of %s's GPUs: %q", node, msg)
	}
	// The sharing pods finish (the node-lifecycle loop ends them).
	finish := time.Now()
	for _, p := range ps {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"0s"}}}`, RunFor)
		if _, err := c.cs.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ps = c.waitBound(ns, 60*time.Second)
	t.Logf("big bound %.1f s after the sharing pods were told to finish", time.Since(finish).Seconds())
	for _, p := range ps {
		if p.Name == "big" && p.Spec.NodeName != node {
			t.Errorf("big on %s, want %s (the shared claim's devices, freed)", p.Spec.NodeName, node)
		}
	}
	cl, err := c.cs.ResourceV1().ResourceClaims(ns).Get(context.Background(), "shared", metav1.GetOptions{})
	if err != nil || cl.Status.Allocation != nil || len(cl.Status.ReservedFor) != 0 {
		t.Errorf("the shared claim after its pods finished: %v", cl.Status)
	}
	c.checkClaims(ns, map[string]want{"shared": wantCC9, "eight-h100": wantH100x8})
	if pr := k.problems(); len(pr) > 0 {
		t.Errorf("node-lifecycle loop: %v", pr)
	}
}

// A pod that failed waits out its back-off unless an event may let it run.
// With back-offs of 10 minutes (--pod-initial-backoff, --pod-max-backoff)
// only such an event can retry a pod within the test: a node's
// ResourceSlice published after the pod failed (its driver started late)
// lets the pod waiting for devices be bound, and its PersistentVolumeClaim
// bound lets the pod waiting for its volume be.
func TestRequeuedWhenDevicesOrVolumesCome(t *testing.T) {
	c := newClusterWith(t, clusterOpts{nodes: 2, controllers: claimController, dra: true, models: "h100"})
	ctx := context.Background()
	ns := "requeue"
	if err := c.cs.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	c.template(ns, "eight-h100", wantH100x8)
	immediate := storagev1.VolumeBindingImmediate // a claim the PV controller binds (not run here): its pod waits for it
	if _, err := c.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "now"},
		Provisioner: "example.com/none", VolumeBindingMode: &immediate}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.volumeClaim(ns, "data", "now")
	c.startScheduler("--pod-initial-backoff", "10m", "--pod-max-backoff", "10m")
	c.create(ns, c.claimPod(ns, podSpec{name: "devices"}, "eight-h100", false), c.volumePod(ns, podSpec{name: "volume", gpus: 1}, "data"))
	c.waitCondition(ns, "devices", "Unschedulable", "0/2 nodes are available: 2 cannot allocate all claims.", 30*time.Second)
	c.waitCondition(ns, "volume", "Unschedulable", "pod has unbound PersistentVolumeClaims: data", 30*time.Second)

	published := time.Now()
	c.publishSlices(0)
	c.waitBound(ns, 60*time.Second, "volume")
	t.Logf("devices: bound %.1f s after its node's slice was published", time.Since(published).Seconds())
	bound := time.Now()
	c.bindVolumeClaim(ns, "data")
	c.waitBound(ns, 60*time.Second)
	t.Logf("volume: bound %.1f s after its claim was", time.Since(bound).Seconds())
	c.checkClaims(ns, map[string]want{"eight-h100": wantH100x8})
	c.checkRecorded(ns)
}
