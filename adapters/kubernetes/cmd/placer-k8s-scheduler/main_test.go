package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/ptr"

	"placer.local/kubernetes/internal/plan"
	"placer.local/kubernetes/internal/translate"
)

func testScheduler(t *testing.T) (*scheduler, *fake.Clientset) {
	cs := fake.NewSimpleClientset()
	s := newScheduler(config{schedulerName: "placer", bindWorkers: 4}, cs, nil, nil)
	return s, cs
}

// bindDone: the annotations of a claim the PV controller has bound (a map
// of its own each time).
func bindDone() map[string]string { return map[string]string{bindCompleted: "yes"} }

func testPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{SchedulerName: "placer", NodeName: node}}
}

// A deletion the watch missed comes as a tombstone: it is a deletion all
// the same (the pod's assumption and back-off go).
func TestTombstonesAreDeletions(t *testing.T) {
	s, _ := testScheduler(t)
	p := testPod("gone", "node-1")
	s.assumed[p.UID] = assumed{pod: p, when: time.Now()}
	s.queue.Failed(p.UID, time.Now(), false)
	s.podDeleted(cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: p})
	if _, ok := s.assumed[p.UID]; ok || s.queue.Attempts(p.UID) != 0 {
		t.Errorf("a tombstone left the pod assumed (%v) or backing off (%d)", ok, s.queue.Attempts(p.UID))
	}
	select {
	case <-s.wake:
	default:
		t.Errorf("a pod that held a node went and the loop was not woken")
	}
	s.podDeleted(cache.DeletedFinalStateUnknown{Key: "ns/other", Obj: "not a pod"}) // no panic
}

// A Binding the API server refuses drops the pod's assumption at once (its
// node is free for the next round) and the pod backs off; one it takes
// carries a share's GPU index in its annotations.
func TestFailedBindingDropsItsAssumption(t *testing.T) {
	s, cs := testScheduler(t)
	var got []*corev1.Binding
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		if b.Name == "refused" {
			return true, nil, errors.New("node gone")
		}
		got = append(got, b)
		return true, b, nil
	})
	refused, share := testPod("refused", ""), testPod("share", "")
	share.Annotations = map[string]string{translate.GPUMilliAnnot: "500"}
	bound, failed := s.bind(context.Background(), []plan.Bind{{Pod: refused, Node: "node-1", GPU: -1}, {Pod: share, Node: "node-2", GPU: 3}}, 1)
	if bound != 1 || failed != 1 {
		t.Fatalf("%d bound, %d failed", bound, failed)
	}
	if _, ok := s.assumed[refused.UID]; ok || s.queue.Attempts(refused.UID) != 1 {
		t.Errorf("the refused pod: assumed %v, attempts %d", ok, s.queue.Attempts(refused.UID))
	}
	if a, ok := s.assumed[share.UID]; !ok || a.pod.Spec.NodeName != "node-2" || a.pod.Annotations[translate.GPUIndexAnnot] != "3" {
		t.Errorf("the bound share is not assumed on node-2 with GPU 3: %+v", a)
	}
	if len(got) != 1 || got[0].Target.Name != "node-2" || got[0].UID != share.UID || got[0].Annotations[translate.GPUIndexAnnot] != "3" {
		t.Errorf("the Binding: %+v", got)
	}
}

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods/p/binding": "pods/binding",
		"/api/v1/pods":                         "pods",
		"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x":        "leases",
		"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/g/status": "podgroups/status",
		"/api/v1/namespaces/ns":           "namespaces",
		"/apis/scheduling.k8s.io/v1beta1": "discovery",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// --rack-label: label keys, finest first, each once; empty: no topology.
func TestTopologyLabelsFlag(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "[]", ""},
		{"placer.io/rack", "[placer.io/rack]", ""},
		{defaultTopology, "[nvidia.com/gpu.clique placer.io/rack topology.kubernetes.io/zone]", ""},
		{" nvidia.com/gpu.clique , placer.io/rack ", "[nvidia.com/gpu.clique placer.io/rack]", ""},
		{"placer.io/rack,,topology.kubernetes.io/zone", "", `"" is not a label key`},
		{"placer.io/rack,placer.io/rack", "", `label "placer.io/rack" given twice`},
		{"rack label", "", `"rack label" is not a label key`},
	} {
		got, err := topologyLabels(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("%q: %v %v, want %s", tc.in, got, err, tc.want)
		}
	}
}

// failedNow: pod p tried in a cycle that looks now and failed, so it backs
// off (a minute: longer than any test waits) unless an event requeues it.
func failedNow(s *scheduler, p *corev1.Pod) {
	s.queue.Initial, s.queue.Max = time.Minute, time.Minute
	s.queue.Ready([]*corev1.Pod{p}, time.Now())
	s.queue.Failed(p.UID, time.Now(), false)
	select { // a wake left by earlier events
	case <-s.wake:
	default:
	}
}

// readyAgain: whether p is ready in a cycle now (a requeue since it failed),
// and whether a cycle was poked.
func readyAgain(s *scheduler, p *corev1.Pod) (ready, poked bool) {
	r, _, _, _ := s.queue.Ready([]*corev1.Pod{p}, time.Now())
	select {
	case <-s.wake:
		poked = true
	default:
	}
	return len(r) == 1, poked
}

// A claim's changes: devices given back (its allocation cleared, its
// reservations fewer, an allocated claim deleted, seen or missed by the
// watch) requeue the pods that failed; devices taken (allocated, more
// reservations) only poke a cycle; nothing of its allocation changed,
// neither.
func TestClaimChangesThatGiveDevicesBackRequeue(t *testing.T) {
	s, _ := testScheduler(t)
	p := testPod("waits", "")
	claim := func(allocated bool, reserved int) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "ns"}}
		if allocated {
			c.Status.Allocation = &resourceapi.AllocationResult{}
		}
		for i := range reserved {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: fmt.Sprint("p", i)})
		}
		return c
	}
	for _, tc := range []struct {
		name         string
		old, o       any
		ready, poked bool
	}{
		{"deallocated", claim(true, 0), claim(false, 0), true, true},
		{"a reservation fewer", claim(true, 2), claim(true, 1), true, true},
		{"allocated elsewhere", claim(false, 0), claim(true, 0), false, true},
		{"a reservation more", claim(true, 1), claim(true, 2), false, true},
		{"its metadata alone", claim(true, 1), claim(true, 1), false, false},
		{"an allocated claim deleted", claim(true, 0), nil, true, true},
		{"its tombstone", cache.DeletedFinalStateUnknown{Key: "ns/gpu", Obj: claim(true, 1)}, nil, true, true},
		{"an unallocated claim deleted", claim(false, 0), nil, false, true},
	} {
		failedNow(s, p)
		s.claims.claimChanged(tc.old, tc.o)
		if ready, poked := readyAgain(s, p); ready != tc.ready || poked != tc.poked {
			t.Errorf("%s: ready %v poked %v, want %v and %v", tc.name, ready, poked, tc.ready, tc.poked)
		}
	}
}

// A PersistentVolumeClaim bound to its volume, or a node's taint gone,
// requeues a pod that failed, through the informers; a claim's annotation
// or a node's heartbeat (its conditions' times alone) is no change.
func TestVolumeBoundOrNodeChangedRequeues(t *testing.T) {
	s, cs := testScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pvc, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(ctx,
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.factory.Start(ctx.Done())
	s.factory.WaitForCacheSync(ctx.Done())
	p := testPod("waits", "")
	// The adds' requeues past: a failure that stays failed.
	for deadline := time.Now().Add(5 * time.Second); ; {
		failedNow(s, p)
		time.Sleep(20 * time.Millisecond)
		if ready, _ := readyAgain(s, p); !ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("requeued for 5 s after the informers' first adds")
		}
	}
	// requeued: p failed, then `update`; whether p is ready again within 5 s.
	requeued := func(update func() error) bool {
		failedNow(s, p)
		if err := update(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if ready, _ := readyAgain(s, p); ready {
				return true
			}
		}
		return false
	}
	if !requeued(func() error {
		pvc.Spec.VolumeName, pvc.Status.Phase, pvc.Annotations = "pv-1", corev1.ClaimBound, bindDone()
		_, err := cs.CoreV1().PersistentVolumeClaims("ns").Update(ctx, pvc, metav1.UpdateOptions{})
		return err
	}) {
		t.Error("a pod that failed not requeued when its claim was bound")
	}
	if !requeued(func() error {
		_, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}},
			metav1.CreateOptions{})
		return err
	}) {
		t.Error("a pod that failed not requeued when its claim's volume came")
	}
	if !requeued(func() error {
		node.Spec.Taints = nil
		_, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	}) {
		t.Error("a pod that failed not requeued when a node's taint went")
	}

	annotated := pvc.DeepCopy()
	annotated.Annotations = map[string]string{"note": "x", bindCompleted: "yes"}
	ready := func(n *corev1.Node, at time.Time) *corev1.Node {
		n = n.DeepCopy()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(at)}}
		return n
	}
	now := time.Now()
	for name, changed := range map[string]bool{
		"a claim's annotation": changedAs(volumeClaimChanged)(pvc, annotated),
		"a heartbeat":          changedAs(nodeChanged)(ready(node, now), ready(node, now.Add(time.Second))),
		"not a claim":          !changedAs(volumeClaimChanged)(pvc, "tombstone"),
		"a volume bound": changedAs(volumeChanged)(&corev1.PersistentVolume{Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}},
			&corev1.PersistentVolume{Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}}),
	} {
		if changed {
			t.Errorf("%s: read as a change", name)
		}
	}
	if !changedAs(volumeChanged)(&corev1.PersistentVolume{Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased}},
		&corev1.PersistentVolume{Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}) {
		t.Error("a volume made available not read as a change")
	}
	unbound := pvc.DeepCopy()
	unbound.Annotations = nil
	if !changedAs(volumeClaimChanged)(unbound, pvc) {
		t.Error("a claim's binding completed (its annotation) not read as a change")
	}
}

// A pod's claims: a bound claim's volume's node affinity is where the pod
// may go (a generic ephemeral volume's claim too); a claim bound to a
// volume that is not there holds the pod, saying so. A claim of a
// WaitForFirstConsumer class with a provisioner sends the pod where the
// class's topologies allow; once placed, the claim is given the node and
// the pod holds it until the claim is bound. Claims this scheduler cannot
// see bound (Immediate, no class) hold their pods. Where the driver
// publishes its storage capacity, a claim to provision goes only where a
// CSIStorageCapacity of its class holds it. A claim of pre-made
// volumes sends the pod where one could take it, and once placed the
// volume Take chose is given the claim.
func TestClaimsVolumes(t *testing.T) {
	s, cs := testScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	local := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: translate.HostnameKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-3"}}}}}}
	nvme := func(name, size string, claimRef *corev1.ObjectReference) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{StorageClassName: "local",
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}, ClaimRef: claimRef,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, NodeAffinity: &corev1.VolumeNodeAffinity{Required: local}},
			Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	}
	for _, pv := range []*corev1.PersistentVolume{
		{ObjectMeta: metav1.ObjectMeta{Name: "pv-local"}, Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: local}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pv-anywhere"}},
		nvme("pv-nvme-big", "100Gi", nil), nvme("pv-nvme-small", "10Gi", nil), nvme("pv-nvme-tiny", "1Gi", nil),
		nvme("pv-nvme-other", "10Gi", &corev1.ObjectReference{Namespace: "ns", Name: "other"}),
	} {
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "zonal"}, Provisioner: "disk.example.com", VolumeBindingMode: &wffc,
			AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
				{Key: "topology.kubernetes.io/zone", Values: []string{"zone-1"}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: "nfs"}, Provisioner: "nfs.example.com", VolumeBindingMode: &immediate},
	} {
		if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(name, pv, class string) {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}}}}
		if pv != "" {
			c.Status.Phase, c.Annotations = corev1.ClaimBound, bindDone()
		}
		if class != "" {
			c.Spec.StorageClassName = &class
		}
		if name == "w-scratch" { // pod w's generic ephemeral volume's
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "w", UID: "uid-w", Controller: ptr.To(true)}}
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The zonal class's driver publishes its capacity: node-3's holds 5Gi,
	// node-4's largest volume is 1Gi, node-1's is another class's.
	tracks := true
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.example.com"},
		Spec: storagev1.CSIDriverSpec{StorageCapacity: &tracks}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cp := range []struct{ class, node, capacity, most string }{{"zonal", "node-3", "10Gi", ""}, {"zonal", "node-4", "100Gi", "1Gi"}, {"local", "node-1", "100Gi", ""}} {
		q, m := resource.MustParse(cp.capacity), resource.MustParse(cp.capacity)
		if cp.most != "" {
			m = resource.MustParse(cp.most)
		}
		if _, err := cs.StorageV1().CSIStorageCapacities("ns").Create(ctx, &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: cp.class + "-" + cp.node},
			StorageClassName: cp.class, NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{translate.HostnameKey: cp.node}},
			Capacity: &q, MaximumVolumeSize: &m}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim("data", "pv-local", "")
	claim("w-scratch", "pv-anywhere", "")
	claim("lost", "pv-gone", "")
	claim("ckpt", "", "zonal")
	claim("nvme", "", "local")
	claim("shared", "", "nfs")
	claim("plain", "", "")
	s.factory.Start(ctx.Done())
	s.factory.WaitForCacheSync(ctx.Done())
	withClaims := func(name string, claims ...string) *corev1.Pod {
		p := testPod(name, "")
		for _, c := range claims {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		}
		return p
	}
	w := withClaims("w", "data")
	w.Spec.Volumes = append(w.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
	if why := s.volumeHold(nil, w); why != "" {
		t.Errorf("w held: %s", why)
	}
	other := w.DeepCopy() // a pod of w's name again (w deleted, made anew): the claim is the old w's
	other.UID = "uid-w2"
	if why, want := s.volumeHold(nil, other), "placer: PVC ns/w-scratch was not created for pod ns/w (pod is not owner)"; why != want {
		t.Errorf("a pod not owning its ephemeral volume's claim: held %q, want %q", why, want)
	}
	if got := s.volumeNodes(w); got == nil || !reflect.DeepEqual(got.Bound, []*corev1.NodeSelector{local}) || got.Provision != nil || got.Node != "" {
		t.Errorf("w's volumes' nodes %+v, want pv-local's alone", got)
	}
	for _, tc := range []struct{ claim, why string }{
		{"lost", `placer: persistentvolumeclaim "lost" is bound to persistentvolume "pv-gone", which does not exist`},
		{"shared", "placer: pod has unbound PersistentVolumeClaims: shared (StorageClass nfs, Immediate: waiting for the volume to be bound); it waits until they are bound"},
		{"plain", "placer: pod has unbound PersistentVolumeClaims: plain (no StorageClass: waiting for a volume to be bound to it); it waits until they are bound"},
	} {
		if why := s.volumeHold(nil, withClaims(tc.claim, "data", tc.claim)); why != tc.why {
			t.Errorf("%s: held %q, want %q", tc.claim, why, tc.why)
		}
	}

	// To provision: the class's zone, then the node it is given.
	p := withClaims("trainer", "data", "ckpt")
	if why := s.volumeHold(nil, p); why != "" {
		t.Errorf("trainer held: %s", why)
	}
	zone1 := topologySelector([]corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
		{Key: "topology.kubernetes.io/zone", Values: []string{"zone-1"}}}}})
	if got := s.volumeNodes(p); got == nil || len(got.Bound) != 1 || !reflect.DeepEqual(got.Provision, []*corev1.NodeSelector{zone1}) || got.Node != "" {
		t.Errorf("trainer's volumes' nodes %+v", got)
	}
	node3 := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: translate.HostnameKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-3"}}}}}}
	if got := s.volumeNodes(p); got == nil || !reflect.DeepEqual(got.Capacity, []*corev1.NodeSelector{node3}) {
		t.Errorf("trainer's claim's capacity %+v, want node-3's alone", got.Capacity)
	}
	b := plan.Bind{Pod: p, Node: "node-3", GPU: -1}
	s.assumed[p.UID] = assumed{pod: b.Assumed(), when: time.Now()}
	if wait, err := s.provision(ctx, b); !wait || err != nil {
		t.Fatalf("provision: wait %v, err %v", wait, err)
	}
	if !s.assumed[p.UID].provisioning {
		t.Error("the pod not held on its node while its claim is provisioned")
	}
	waitClaim := func(what string, ok func(*corev1.PersistentVolumeClaim) bool) {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if c, err := s.pvcs.PersistentVolumeClaims("ns").Get("ckpt"); err == nil && ok(c) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the informer did not see the claim %s", what)
			}
		}
	}
	waitClaim("given node-3", func(c *corev1.PersistentVolumeClaim) bool { return c.Annotations[selectedNode] == "node-3" })
	if got := s.volumeNodes(p); got == nil || got.Node != "node-3" {
		t.Errorf("after: trainer's volumes' nodes %+v, want node-3's", got)
	}
	if s.provisioned(p, "node-3") {
		t.Error("provisioned before its claim is bound")
	}
	if s.provisioned(p, "node-4") != true {
		t.Error("a claim given another node than the pod's not seen")
	}
	c, _ := cs.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "ckpt", metav1.GetOptions{})
	c.Spec.VolumeName, c.Status.Phase, c.Annotations = "pv-ckpt", corev1.ClaimBound, bindDone()
	if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClaim("bound", claimBound)
	if !s.provisioned(p, "node-3") {
		t.Error("its claim bound, the pod still held")
	}
	if wait, err := s.provision(ctx, b); wait || err != nil {
		t.Errorf("its claims bound: provision says wait %v, err %v", wait, err)
	}

	// Pre-made: the volumes that could take it, smallest first (not one too
	// small, nor one given another claim); then the one Take chose given it.
	q := withClaims("scratch", "nvme")
	if why := s.volumeHold(nil, q); why != "" {
		t.Errorf("scratch held: %s", why)
	}
	names := func(v *translate.Volumes) []string {
		var out []string
		for _, pm := range v.PreMade {
			for _, pv := range pm.Volumes {
				out = append(out, pm.Claim+":"+pv.Name)
			}
		}
		return out
	}
	if got := s.volumeNodes(q); got == nil || strings.Join(names(got), ",") != "nvme:pv-nvme-small,nvme:pv-nvme-big" {
		t.Fatalf("scratch's volumes %+v", got)
	}
	b = plan.Bind{Pod: q, Node: "node-3", GPU: -1, Volumes: map[string]string{"nvme": "pv-nvme-small"}}
	s.assumed[q.UID] = assumed{pod: b.Assumed(), when: time.Now()}
	if wait, err := s.provision(ctx, b); !wait || err != nil || !s.assumed[q.UID].provisioning {
		t.Fatalf("provision: wait %v, err %v", wait, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := s.volumeNodes(q); strings.Join(names(got), ",") == "nvme:pv-nvme-small" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pv-nvme-small not seen given nvme: %v", names(s.volumeNodes(q)))
		}
	}
	if pv, _ := cs.CoreV1().PersistentVolumes().Get(ctx, "pv-nvme-small", metav1.GetOptions{}); pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "nvme" {
		t.Errorf("pv-nvme-small's claimRef %+v", pv.Spec.ClaimRef)
	}
	if s.provisioned(q, "node-3") {
		t.Error("provisioned before its claim is bound")
	}
	if n := s.waitingForVolumes(); n != 2 { // trainer's assumption still stands, marked
		t.Errorf("%v pods waiting for volumes, want 2", n)
	}
}

// A pod's claims of access mode ReadWriteOncePod are read for the rounds
// (translate.Options.SoloClaims, where one pod at a time takes each), not
// held for: a ReadWriteOnce claim is not one of them.
func TestReadWriteOncePodClaimsRead(t *testing.T) {
	s, cs := testScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, mode := range map[string]corev1.PersistentVolumeAccessMode{"solo": corev1.ReadWriteOncePod, "shared": corev1.ReadWriteOnce} {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: bindDone()}, Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName: "pv-" + name, AccessModes: []corev1.PersistentVolumeAccessMode{mode}}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
		if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.factory.Start(ctx.Done())
	s.factory.WaitForCacheSync(ctx.Done())
	p := withClaim(testPod("p", ""), "solo")
	p.Spec.Volumes = append(p.Spec.Volumes, withClaim(p, "shared").Spec.Volumes...)
	if got := s.soloClaims(p); !reflect.DeepEqual(got, []string{"solo"}) {
		t.Errorf("p's ReadWriteOncePod claims %v, want [solo]", got)
	}
	if why := s.volumeHold(nil, p); why != "" {
		t.Errorf("p held: %s", why)
	}
}

// A pending pod that failed, then edited (a toleration added, an
// annotation changed), is ready at once, its attempts still counted; a
// change of its status alone (this scheduler's own condition) is no edit.
func TestEditedPodTriedAgain(t *testing.T) {
	s, _ := testScheduler(t)
	p := testPod("edited", "")
	failedNow(s, p)
	cond := p.DeepCopy()
	cond.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}
	s.podUpdated(p, cond)
	if ready, poked := readyAgain(s, p); ready || poked {
		t.Errorf("after its condition was written: ready %v, poked %v", ready, poked)
	}
	for name, edit := range map[string]func(*corev1.Pod){
		"a toleration": func(x *corev1.Pod) {
			x.Spec.Tolerations = append(x.Spec.Tolerations, corev1.Toleration{Key: "maintenance", Operator: corev1.TolerationOpExists})
		},
		"an annotation": func(x *corev1.Pod) { x.Annotations = map[string]string{translate.GPUMilliAnnot: "500"} },
	} {
		failedNow(s, p)
		q := cond.DeepCopy()
		edit(q)
		s.podUpdated(cond, q)
		if ready, poked := readyAgain(s, p); !ready || !poked || s.queue.Attempts(p.UID) == 0 {
			t.Errorf("%s added: ready %v, poked %v, attempts %d", name, ready, poked, s.queue.Attempts(p.UID))
		}
	}
}

// A peer that sends a request's head a line at a time is cut at the head's
// deadline, and a head past the bound is refused, while a probe is answered.
func TestProbeServerCutsSlowPeers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := probeServer(mux, 300*time.Millisecond)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	addr := ln.Addr().String()

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := slow.Read(buf); err != nil {
				closed <- time.Since(start)
				return
			}
		}
	}()
	_, _ = slow.Write([]byte("GET /livez HTTP/1.1\r\nHost: x\r\n"))
	feeding := time.NewTicker(50 * time.Millisecond)
	defer feeding.Stop()
	var after time.Duration
	giveUp := time.After(20 * time.Second)
wait:
	for {
		select {
		case after = <-closed:
			break wait
		case <-feeding.C:
			_, _ = slow.Write([]byte("X-a: b\r\n"))
		case <-giveUp:
			t.Fatal("a head sent a line at a time was never cut")
		}
	}
	// The deadline runs from the server's accept, which may come a little
	// before `start`: cut well before it would be another cause.
	if after < 200*time.Millisecond {
		t.Fatalf("cut after %v, before the head's deadline (300 ms)", after)
	}

	resp, err := http.Get("http://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("probe: %d", resp.StatusCode)
	}

	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	_, _ = big.Write([]byte("GET /livez HTTP/1.1\r\nHost: x\r\nX-pad: " + strings.Repeat("a", 16<<10) + "\r\n\r\n"))
	_ = big.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(big)
	if !strings.HasPrefix(string(got), "HTTP/1.1 431 ") {
		t.Fatalf("a 16 KB head: %q", string(got))
	}
}

// What NodeVolumeLimits and VolumeZone read: a pod's CSI volumes (a bound
// claim's handle, an unbound one's name of its own, no volume of an in-tree
// plugin), a node's drivers, limits and attachments, the drivers that
// refuse nodes they are not on, and where a volume's zone labels let a
// pod go.
func TestAttachableVolumesAndZones(t *testing.T) {
	s, cs := testScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ebs = "ebs.example.com"
	csiPV := func(name, handle string, labels map[string]string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: ebs, VolumeHandle: handle}}}}
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	three, yes := int32(3), true
	for _, o := range []runtime.Object{
		csiPV("pv-1", "vol-1", map[string]string{corev1.LabelTopologyZone: "zone-1__zone-2"}),
		csiPV("pv-2", "vol-2", map[string]string{corev1.LabelFailureDomainBetaZone: "zone-3", corev1.LabelTopologyRegion: " __x"}),
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-host"}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-old"}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-old"}}}},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "gp3"}, Provisioner: ebs, VolumeBindingMode: &wffc},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "gp2"}, Provisioner: "kubernetes.io/aws-ebs", VolumeBindingMode: &wffc},
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: ebs}, Spec: storagev1.CSIDriverSpec{PreventPodSchedulingIfMissing: &yes}},
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "other.example.com"}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: ebs, NodeID: "i-1", Allocatable: &storagev1.VolumeNodeResources{Count: &three}}, {Name: "other.example.com", NodeID: "i-1"}}}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-2"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: ebs, NodeName: "node-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-2")}}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-x"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: ebs, NodeName: "node-2",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")}}},
	} {
		if err := cs.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	for claim, pv := range map[string]string{"a": "pv-1", "b": "", "h": "pv-host", "z": "pv-2", "old": "pv-old", "gp2": ""} {
		class := "gp3"
		if claim == "gp2" {
			class = "gp2"
		}
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName: pv, StorageClassName: &class}}
		if pv != "" {
			c.Status.Phase, c.Annotations = corev1.ClaimBound, bindDone()
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.factory.Start(ctx.Done())
	s.factory.WaitForCacheSync(ctx.Done())
	p := testPod("p", "")
	for _, c := range []string{"a", "b", "h", "ghost"} {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	a := s.attacher()
	want := map[string]translate.CSIVolume{ebs + "/vol-1": {Driver: ebs}, ebs + "/placer-unbound-ns/b": {Driver: ebs}}
	if got := a.Volumes(p); !reflect.DeepEqual(got, want) {
		t.Errorf("p's CSI volumes %v, want %v", got, want)
	}
	// In-tree EBS volumes, as kube-scheduler counts them: bound, of an
	// in-tree class not bound yet, named in the pod itself.
	q := withClaim(testPod("q", ""), "old")
	q.UID = "uid-q"
	q.Spec.Volumes = append(q.Spec.Volumes, withClaim(q, "gp2").Spec.Volumes[0], corev1.Volume{Name: "inline",
		VolumeSource: corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-inline"}}})
	const csiEBS = "ebs.csi.aws.com"
	want = map[string]translate.CSIVolume{csiEBS + "/vol-old": {Driver: csiEBS, InTree: true}, csiEBS + "/placer-unbound-ns/gp2": {Driver: csiEBS, InTree: true},
		csiEBS + "/vol-inline": {Driver: csiEBS, InTree: true}}
	if got := a.Volumes(q); !reflect.DeepEqual(got, want) {
		t.Errorf("q's in-tree volumes %v, want %v", got, want)
	}
	if got := a.Node("node-1"); !reflect.DeepEqual(got, translate.NodeAttach{Drivers: map[string]int64{ebs: 3, "other.example.com": -1},
		Attached: map[string]string{ebs + "/vol-2": ebs}}) {
		t.Errorf("node-1: %+v", got)
	}
	if got := a.Node("node-3"); got.Drivers != nil || got.Attached != nil {
		t.Errorf("node-3, without a CSINode or attachments: %+v", got)
	}
	if !a.Required(ebs) || a.Required("other.example.com") || a.Required("gone.example.com") {
		t.Error("the drivers that refuse nodes they are not on: want ebs alone")
	}

	// VolumeZone: pv-1's zone label holds two zones; pv-2's beta zone label
	// is read on a node's GA one where it lacks the beta one, and its
	// region label, with an empty zone, is not read.
	zone := func(labels map[string]string, pv string) bool {
		v, _ := s.pvs.Get(pv)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
		for _, sel := range zoneSelectors(v) {
			if ok, _ := schedcorev1.MatchNodeSelectorTerms(n, sel); !ok {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		pv     string
		labels map[string]string
		ok     bool
	}{
		{"pv-1", map[string]string{corev1.LabelTopologyZone: "zone-2"}, true},
		{"pv-1", map[string]string{corev1.LabelTopologyZone: "zone-3"}, false},
		{"pv-1", map[string]string{"rack": "r1"}, true},                                 // no zone or region label: anywhere
		{"pv-1", map[string]string{corev1.LabelFailureDomainBetaZone: "zone-1"}, false}, // a GA label is not read on a beta one
		{"pv-2", map[string]string{corev1.LabelTopologyZone: "zone-3"}, true},
		{"pv-2", map[string]string{corev1.LabelFailureDomainBetaZone: "zone-1", corev1.LabelTopologyZone: "zone-3"}, false},
		{"pv-2", map[string]string{corev1.LabelTopologyRegion: "eu"}, false},
	} {
		if got := zone(tc.labels, tc.pv); got != tc.ok {
			t.Errorf("%s on a node of %v: %v, want %v", tc.pv, tc.labels, got, tc.ok)
		}
	}
	if v := s.volumeNodes(withClaim(p, "z")); v == nil || len(v.Zone) != 1 {
		t.Errorf("a pod of claim z: %+v, want pv-2's zone", v)
	}
}

func withClaim(p *corev1.Pod, claim string) *corev1.Pod {
	q := p.DeepCopy()
	q.Spec.Volumes = []corev1.Volume{{Name: claim, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	return q
}

// A bound pod whose kubelet gives room back (a resize in place done) lets
// the pods backing off for room try again; a pod that grows does not.
func TestRoomGivenBackByAResizeRequeues(t *testing.T) {
	s, _ := testScheduler(t)
	p := testPod("waiting", "")
	failedNow(s, p)
	running := func(cpu string) *corev1.Pod {
		r := testPod("running", "node-1")
		r.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}}}}
		r.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
		return r
	}
	s.podUpdated(running("16"), running("80"))
	if ready, _ := readyAgain(s, p); ready {
		t.Error("a pod that grew let the pods waiting for room try again")
	}
	s.podUpdated(running("80"), running("16"))
	if ready, poked := readyAgain(s, p); !ready || !poked {
		t.Errorf("room given back: ready %v, poked %v", ready, poked)
	}
}
