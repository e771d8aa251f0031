package e2e

// Issue 52: the scheduler binds only what can run, in the order its users
// expect. Each test here failed against the scheduler of e6e0c96 (see the
// commit that added it, and docs/results.md).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ---------------------------------------------------------------- helpers

// metric: the value of a sample of a /metrics page, the samples whose
// name (with labels) starts with `sample` summed; -1 when none.
func metric(page, sample string) float64 {
	total, found := 0.0, false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, sample) {
			continue
		}
		rest := strings.TrimPrefix(line, sample)
		if rest != "" && rest[0] != ' ' && rest[0] != '{' && rest[0] != ',' && rest[0] != '}' {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
			found = true
		}
	}
	if !found {
		return -1
	}
	return total
}

func scrape(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// startSchedulerMetrics: startScheduler with --http on a free port; its /metrics URL.
func (c *cluster) startSchedulerMetrics(extra ...string) string {
	hp := freePorts(c.t, 1)
	c.startScheduler(append([]string{"--http", fmt.Sprintf("127.0.0.1:%d", hp)}, extra...)...)
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", hp)
}

// apiserverMetrics: the API server's own /metrics.
func (c *cluster) apiserverMetrics() string {
	b, err := c.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		c.t.Fatalf("apiserver /metrics: %v", err)
	}
	return string(b)
}

// waitFor polls cond until it holds, failing with its last word after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (c *cluster) get(ns, name string) *corev1.Pod {
	p, err := c.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("get %s/%s: %v", ns, name, err)
	}
	return p
}

// unbound: the pods of ns without a node.
func (c *cluster) unbound(ns string) []string {
	var out []string
	for _, p := range c.pods(ns) {
		if p.Spec.NodeName == "" {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// recordedCycles: the scheduler's cycle number of each pod it bound (its --record).
func (c *cluster) recordedCycles() map[string]int {
	out := map[string]int{}
	b, _ := readFile(c.record)
	for _, line := range strings.Split(b, "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			n, _ := strconv.Atoi(f[2])
			out[f[0]] = n
		}
	}
	return out
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

func pinned(p *corev1.Pod, hosts ...string) *corev1.Pod {
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: hosts}}}}}}}
	return p
}

func hosts(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("node-%d", i))
	}
	return out
}

func (c *cluster) priorityClass(name string, v int32) {
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
	if _, err := c.cs.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// ---------------------------------------------------------------- 1: never bind what cannot run

// Scheduling gates (as Kueue's pod integration holds every pod until
// admission): a gated pod is left alone, no Binding is ever tried for it
// (the API server would refuse it), a gang with a gated member waits
// whole, and once the last gate is gone the pod is bound in the first
// cycle after.
func TestGatedPodsLeftAloneThenBound(t *testing.T) {
	c := newCluster(t, 8, 0)
	url := c.startSchedulerMetrics()
	ns := "gates"
	gate := func(p *corev1.Pod, names ...string) *corev1.Pod {
		for _, n := range names {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
		}
		return p
	}
	c.create(ns,
		gate(c.buildPod(ns, podSpec{name: "queued", gpus: 8}), "kueue.x-k8s.io/admission"),
		gate(c.buildPod(ns, podSpec{name: "twice", gpus: 8}), "kueue.x-k8s.io/admission", "example.com/quota"),
		c.buildPod(ns, podSpec{name: "g-0", group: "g", gpus: 8, minMember: 3}),
		c.buildPod(ns, podSpec{name: "g-1", group: "g", gpus: 8, minMember: 3}),
		gate(c.buildPod(ns, podSpec{name: "g-2", group: "g", gpus: 8, minMember: 3}), "kueue.x-k8s.io/admission"),
		c.buildPod(ns, podSpec{name: "free", gpus: 1}))
	c.waitBound(ns, 60*time.Second, "queued", "twice", "g-0", "g-1", "g-2")
	msg := c.waitCondition(ns, "g-0", "Unschedulable", "waiting for pod group g: 2 of its minMember 3 pods exist", 30*time.Second)
	t.Logf("g-0 while g-2 is gated: %s", msg)
	if u := c.unbound(ns); strings.Join(u, ",") != "g-0,g-1,g-2,queued,twice" {
		t.Fatalf("unbound %v: a gated pod or a part of the gang was bound", u)
	}
	if e := metric(scrape(url), "placer_k8s_bind_errors_total"); e != 0 {
		t.Fatalf("%v Binding requests refused: the scheduler tried to bind gated pods", e)
	}
	for _, name := range []string{"queued", "g-0"} {
		if cd := condition(c.get(ns, name)); name == "queued" && cd != nil && cd.Reason != "SchedulingGated" {
			t.Errorf("%s: the scheduler wrote a condition on a gated pod: %+v", name, cd)
		}
	}
	ungate := func(name string, keep int) {
		p := c.get(ns, name)
		p.Spec.SchedulingGates = p.Spec.SchedulingGates[:keep]
		if _, err := c.cs.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("removing %s's gates: %v", name, err)
		}
	}
	ungate("twice", 1) // one gate of two: still gated
	c0 := metric(scrape(url), "placer_k8s_scheduling_cycles_total")
	ungate("queued", 0)
	ungate("g-2", 0)
	c.waitBound(ns, 60*time.Second, "twice")
	cycles := c.recordedCycles()
	for _, name := range []string{"queued", "g-0", "g-1", "g-2"} {
		if n := cycles[ns+"/"+name]; float64(n) > c0+2 {
			t.Errorf("%s bound in cycle %d; its last gate went after cycle %v", name, n, c0)
		}
	}
	if p := c.get(ns, "twice"); p.Spec.NodeName != "" {
		t.Errorf("twice was bound with a gate left")
	}
	ungate("twice", 0)
	c.waitBound(ns, 60*time.Second)
	if e := metric(scrape(url), "placer_k8s_bind_errors_total"); e != 0 {
		t.Errorf("%v Bindings refused", e)
	}
	c.checkCapacity()
}

// kube-scheduler's requests and the node's other limits: native sidecars
// are summed, pod-level resources honoured, the node's pod count, host
// ports and ephemeral storage modelled; the pods that do not fit wait,
// told why in kube-scheduler's words. Judged by kube-scheduler (8 nodes of
// 96 CPUs, 8 GPUs, 1000Gi of ephemeral storage and 110 pods).
func TestNodeLimitsHonoured(t *testing.T) { judged(t, 8, nodeLimits) }

func nodeLimits(c *cluster) {
	t := c.t
	ctx := context.Background()
	n3, err := c.cs.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n3.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("2")
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(ctx, n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := "limits"
	always := corev1.ContainerRestartPolicyAlways
	var pods []*corev1.Pod
	for i := 0; i < 2; i++ { // 40 CPU and a 10-CPU sidecar: 50 each, one fits in 96
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("sidecar-%d", i), cpu: "40", selector: map[string]string{"kubernetes.io/hostname": "node-1"}})
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "none", RestartPolicy: &always, Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10")}}}}
		pods = append(pods, p)
	}
	for i := 0; i < 2; i++ { // 1 CPU a container, 60 for the pod
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("podlevel-%d", i), cpu: "1", selector: map[string]string{"kubernetes.io/hostname": "node-2"}})
		p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("60")}}
		pods = append(pods, p)
	}
	for i := 0; i < 3; i++ { // node-3 holds two pods
		pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("count-%d", i), cpu: "1", selector: map[string]string{"kubernetes.io/hostname": "node-3"}}))
	}
	for i := 0; i < 2; i++ { // one host port
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("port-%d", i), cpu: "1", selector: map[string]string{"kubernetes.io/hostname": "node-4"}})
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 9000, Protocol: corev1.ProtocolTCP}}
		pods = append(pods, p)
	}
	for i := 0; i < 2; i++ { // 600Gi of 1000Gi
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("disk-%d", i), cpu: "1", selector: map[string]string{"kubernetes.io/hostname": "node-5"}})
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("600Gi")
		pods = append(pods, p)
	}
	c.create(ns, pods...)
	if p := c.get(ns, "podlevel-0"); p.Spec.Resources == nil {
		t.Fatalf("the API server dropped spec.resources (feature gate PodLevelResources off?)")
	}
	c.startJudged()
	want := map[string]string{"sidecar": "Insufficient cpu", "podlevel": "Insufficient cpu", "count": "1 Too many pods",
		"port": "1 node(s) didn't have free ports for the requested pod ports", "disk": "1 Insufficient ephemeral-storage"}
	bound := map[string]int{}
	waitFor(t, 90*time.Second, "one pod of each kind waiting, told why", func() (bool, string) {
		bound = map[string]int{}
		told := 0
		for _, p := range c.pods(ns) {
			kind := strings.Split(p.Name, "-")[0]
			if p.Spec.NodeName != "" {
				bound[kind]++
			} else if cd := condition(&p); cd != nil && cd.Status == corev1.ConditionFalse && strings.Contains(cd.Message, want[kind]) {
				told++
			}
		}
		return told == 5 && len(bound) == 5, fmt.Sprintf("bound %v, %d told", bound, told)
	})
	if bound["count"] != 2 || bound["sidecar"] != 1 || bound["podlevel"] != 1 || bound["port"] != 1 || bound["disk"] != 1 {
		t.Errorf("bound per kind %v, want 1 each and 2 on node-3", bound)
	}
	for _, p := range c.pods(ns) {
		if p.Spec.NodeName == "" {
			t.Logf("%s: %s", p.Name, condition(&p).Message)
		}
	}
	c.checkCapacity()
}

// volumeClaim: a PersistentVolumeClaim of 1 GiB of StorageClass "late"
// (made if missing: WaitForFirstConsumer, pre-made volumes, so the claim
// stays unbound until bindVolumeClaim), or of how[0], ReadWriteOnce or
// how[1].
func (c *cluster) volumeClaim(ns, name string, how ...string) {
	ctx := context.Background()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc}
	if _, err := c.cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.t.Fatal(err)
	}
	scn, mode := "late", corev1.ReadWriteOnce
	if len(how) > 0 {
		scn = how[0]
	}
	if len(how) > 1 {
		mode = corev1.PersistentVolumeAccessMode(how[1])
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: &scn, AccessModes: []corev1.PersistentVolumeAccessMode{mode},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := c.cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// bindVolumeClaim: claim `name` bound to a volume made for it (on `node`
// alone where given: a local volume's node affinity), its spec and status
// set as the PV controller (not run here) would.
func (c *cluster) bindVolumeClaim(ns, name string, node ...string) {
	on := ""
	if len(node) > 0 {
		on = node[0]
	}
	pv := c.localVolumeSpec("pv-"+ns+"-"+name, "late", on, ns, name)
	if _, err := c.cs.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.claimVolume(ns, name, pv.Name)
}

// localVolume: a pre-made volume of 1 GiB of `class` on `node`, for no
// claim yet, made.
func (c *cluster) localVolume(name, class, node string) *corev1.PersistentVolume {
	pv, err := c.cs.CoreV1().PersistentVolumes().Create(context.Background(), c.localVolumeSpec(name, class, node, "", ""), metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return pv
}

// localVolumeSpec: a volume of 1 GiB of `class`, on `node` ("" = any), for
// claim ns/claim ("" = none).
func (c *cluster) localVolumeSpec(name, class, node, ns, claim string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}}}}
	if claim != "" {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: claim}
	}
	if node != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	}
	return pv
}

// claimVolume: claim `name`'s spec and status bound to volume `pv`.
func (c *cluster) claimVolume(ns, name, pv string) {
	if err := c.bindClaim(ns, name, pv); err != nil {
		c.t.Fatal(err)
	}
}

// bindClaim: claimVolume, from any goroutine.
func (c *cluster) bindClaim(ns, name, pv string) error {
	ctx := context.Background()
	pvc, err := c.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pvc.Spec.VolumeName = pv
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
	if pvc, err = c.cs.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	pvc.Status.Phase = corev1.ClaimBound
	_, err = c.cs.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	return err
}

// volumePod: a pod of podSpec s mounting PersistentVolumeClaim `claim`.
func (c *cluster) volumePod(ns string, s podSpec, claim string) *corev1.Pod {
	p := c.buildPod(ns, s)
	p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	return p
}

// A pod whose PersistentVolumeClaim is missing, or bound to a volume that
// is not there, or that uses a ResourceClaim, is not bound: it stays
// Pending with PodScheduled=False saying why. A pod whose claim is bound
// is, where its volume's node affinity allows (a local volume on node-3,
// of four nodes); one whose own selector and volume's node agree on no
// node is told so in kube-scheduler's words. Claims of WaitForFirstConsumer
// classes wait for the node Placer chooses: one to provision (class
// "fast", node-4 allowed) is given that node, one of pre-made volumes
// (class "nvme", one volume, on node-1) is given that volume, and each pod
// is bound there once its claim is (the test's provisioner and PV
// controller do what a CSI provisioner and kube-controller-manager would,
// a second after), never before; a claim no pre-made volume can take
// (class "late") keeps its pod pending, told why.
func TestPodsBoundWhereTheirVolumesCanBe(t *testing.T) {
	c := newCluster(t, 4, 0)
	ns := "claims"
	c.create(ns)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "disk.example.com", VolumeBindingMode: &wffc,
			AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
				{Key: "kubernetes.io/hostname", Values: []string{"node-3", "node-4"}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "nvme"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc},
	} {
		if _, err := c.cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The provisioner's driver publishes its capacity: 512Mi on node-3,
	// 10Gi on node-4 (a claim asks 1Gi).
	tracks := true
	if _, err := c.cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.example.com"},
		Spec: storagev1.CSIDriverSpec{StorageCapacity: &tracks}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for node, size := range map[string]string{"node-3": "512Mi", "node-4": "10Gi"} {
		q := resource.MustParse(size)
		if _, err := c.cs.StorageV1().CSIStorageCapacities(ns).Create(ctx, &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "fast-" + node},
			StorageClassName: "fast", NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}},
			Capacity: &q}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"data", "ready", "local", "far", "lost"} {
		c.volumeClaim(ns, name)
	}
	c.volumeClaim(ns, "ckpt", "fast")
	c.volumeClaim(ns, "scratch", "nvme")
	c.volumeClaim(ns, "solo", "late", string(corev1.ReadWriteOncePod))
	c.bindVolumeClaim(ns, "solo")
	c.bindVolumeClaim(ns, "ready")
	c.bindVolumeClaim(ns, "local", "node-3")
	c.bindVolumeClaim(ns, "far", "node-2")
	c.claimVolume(ns, "lost", "pv-gone")
	nvme := c.localVolume("pv-nvme", "nvme", "node-1")
	nvme.Status.Phase = corev1.VolumeAvailable // as the PV controller would mark it
	if _, err := c.cs.CoreV1().PersistentVolumes().UpdateStatus(ctx, nvme, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	withClaim := func(name, claim string) *corev1.Pod { return c.volumePod(ns, podSpec{name: name, gpus: 1}, claim) }
	far := withClaim("far", "far")
	far.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-1"}
	dra := c.buildPod(ns, podSpec{name: "dra", gpus: 0})
	cn := "gpu-claim"
	dra.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}}
	dra.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}

	// The provisioner (a volume on the node claim ckpt is given) and the
	// PV controller (claim scratch bound to the volume given it), each a
	// second after, and whether either pod was bound before and how many
	// pods /metrics says wait for their volumes, each look.
	type done struct{ claim, where string }
	bound := make(chan done, 2)
	var boundEarly atomic.Value
	var waiting atomic.Int64 // the most pods /metrics said wait for their volumes, as each claim is bound
	watch := func(url string) {
		left := map[string]string{"ckpt": "trainer", "scratch": "worker"}
		for ctx.Err() == nil && len(left) > 0 {
			time.Sleep(200 * time.Millisecond)
			for claim, pod := range left {
				if p, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" {
					boundEarly.Store(pod)
				}
				var where string
				if claim == "ckpt" {
					if pvc, err := c.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{}); err == nil {
						where = pvc.Annotations["volume.kubernetes.io/selected-node"]
					}
				} else if pv, err := c.cs.CoreV1().PersistentVolumes().Get(ctx, "pv-nvme", metav1.GetOptions{}); err == nil &&
					pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Name == claim {
					where = "pv-nvme"
				}
				if where == "" {
					continue
				}
				time.Sleep(time.Second)
				if p, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" {
					boundEarly.Store(pod)
				}
				if n := int64(metric(scrape(url), "placer_k8s_pods_waiting_for_volumes")); n > waiting.Load() {
					waiting.Store(n)
				}
				pv := where
				if claim == "ckpt" {
					pv = "pv-ckpt"
					if _, err := c.cs.CoreV1().PersistentVolumes().Create(ctx, c.localVolumeSpec(pv, "fast", where, ns, claim),
						metav1.CreateOptions{}); err != nil {
						t.Errorf("the provisioner: %v", err)
						return
					}
				}
				if err := c.bindClaim(ns, claim, pv); err != nil {
					t.Errorf("binding %s: %v", claim, err)
					return
				}
				bound <- done{claim, where}
				delete(left, claim)
			}
		}
	}
	c.create(ns, withClaim("unbound", "data"), withClaim("missing", "ghost"), withClaim("bound", "ready"), withClaim("local", "local"),
		withClaim("lost", "lost"), withClaim("trainer", "ckpt"), withClaim("worker", "scratch"), withClaim("solo-1", "solo"),
		withClaim("solo-2", "solo"), far, dra)
	go watch(c.startSchedulerMetrics())
	c.waitBound(ns, 60*time.Second, "unbound", "missing", "dra", "far", "lost", "solo-2")
	if on := c.get(ns, "local").Spec.NodeName; on != "node-3" {
		t.Errorf("local bound to %s, its volume is on node-3", on)
	}
	got := map[string]string{}
	for range 2 {
		select {
		case d := <-bound:
			got[d.claim] = d.where
		case <-time.After(30 * time.Second):
			t.Fatalf("claims given a node or volume: %v", got)
		}
	}
	if got["ckpt"] != "node-4" || got["scratch"] != "pv-nvme" {
		t.Errorf("ckpt given %q, scratch %q: want node-4 (of its class's nodes, the one with room) and pv-nvme", got["ckpt"], got["scratch"])
	}
	if on := c.get(ns, "trainer").Spec.NodeName; on != "node-4" {
		t.Errorf("trainer bound to %s, its volume on node-4", on)
	}
	if on := c.get(ns, "worker").Spec.NodeName; on != "node-1" {
		t.Errorf("worker bound to %s, its volume on node-1", on)
	}
	if p := boundEarly.Load(); p != nil {
		t.Errorf("%s bound before its claim was", p)
	}
	if n := waiting.Load(); n != 2 {
		t.Errorf("placer_k8s_pods_waiting_for_volumes at most %d while the claims waited, want 2", n)
	}
	for _, pod := range []string{"trainer", "worker"} {
		if ev := c.waitEvents(ns, pod, "WaitingForVolumes", "placed on", 10*time.Second); len(ev) == 0 {
			t.Errorf("no WaitingForVolumes Event for %s", pod)
		}
	}
	for name, want := range map[string]string{
		"unbound": "0/4 nodes are available: 4 node(s) didn't find available persistent volumes to bind.",
		"missing": `persistentvolumeclaim "ghost" not found`,
		"lost":    `persistentvolumeclaim "lost" is bound to persistentvolume "pv-gone", which does not exist`,
		"far":     "0/4 nodes are available: 1 node(s) had volume node affinity conflict, 3 node(s) didn't match Pod's node affinity/selector.",
		"dra":     `waiting for the pod's ResourceClaims: resourceclaim.resource.k8s.io "gpu-claim" not found`,
		"solo-2":  "0/4 nodes are available: 4 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod.",
	} {
		msg := c.waitCondition(ns, name, "Unschedulable", want, 30*time.Second)
		t.Logf("%s: %s", name, msg)
	}
	if u := c.unbound(ns); strings.Join(u, ",") != "dra,far,lost,missing,solo-2,unbound" {
		t.Errorf("unbound %v", u)
	}
}

// CSI volumes within each node's attach limits (kube-scheduler's
// NodeVolumeLimits) and bound volumes' zone labels (VolumeZone), run with
// this scheduler and with kube-scheduler itself on the same objects:
// both bind the same pods and say the same of the others. The ebs
// driver refuses nodes it is not installed on (node-3 has no CSINode,
// node-4's lists another driver); node-1 attaches two of its volumes and
// has one attached (a VolumeAttachment no pod uses), node-2 one, used by a
// running pod. Of three pods alike, each with a volume of its own, one is
// bound, to node-1; once the VolumeAttachment is gone, one more. A pod
// pinned to node-2 sharing the running pod's volume is bound there, one
// with a new volume is not. A pod whose volume is labelled zone-2 goes
// there; one labelled a zone no node is in waits.
func TestPodsWithinNodesVolumeLimits(t *testing.T) { judged(t, 4, volumeLimits) }

func volumeLimits(c *cluster) {
	t := c.t
	ns := "attach"
	c.create(ns)
	ctx := context.Background()
	const ebs = "ebs.example.com"
	two, one := int32(2), int32(1)
	for _, o := range []struct {
		name    string
		drivers []storagev1.CSINodeDriver
	}{
		{"node-1", []storagev1.CSINodeDriver{{Name: ebs, NodeID: "i-1", Allocatable: &storagev1.VolumeNodeResources{Count: &two}}}},
		{"node-2", []storagev1.CSINodeDriver{{Name: ebs, NodeID: "i-2", Allocatable: &storagev1.VolumeNodeResources{Count: &one}}}},
		{"node-4", []storagev1.CSINodeDriver{{Name: "nfs.example.com", NodeID: "i-4"}}},
	} {
		if _, err := c.cs.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: o.name},
			Spec: storagev1.CSINodeSpec{Drivers: o.drivers}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: ebs},
		Spec: storagev1.CSIDriverSpec{PreventPodSchedulingIfMissing: ptrTo(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// a claim bound to a volume made for it: of the ebs driver, or, with zone labels, a host path
	volume := func(claim string, zone string) {
		c.volumeClaim(ns, claim)
		pv := c.localVolumeSpec("pv-"+claim, "late", "", ns, claim)
		if zone == "" {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: ebs, VolumeHandle: "vol-" + claim}}
		} else {
			pv.Labels = map[string]string{"topology.kubernetes.io/zone": zone}
		}
		if _, err := c.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.claimVolume(ns, claim, pv.Name)
	}
	for _, claim := range []string{"old", "shared", "v1", "v2", "v3", "w"} {
		volume(claim, "")
	}
	volume("z2", "zone-2")
	volume("z9", "zone-9")
	if _, err := c.cs.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-old"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: ebs, NodeName: "node-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptrTo("pv-old")}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	occupant := c.volumePod(ns, podSpec{name: "occupant", gpus: 1}, "shared")
	occupant.Spec.NodeName = "node-2"
	var pending []*corev1.Pod
	for _, s := range []struct{ name, claim, node string }{
		{"v1", "v1", ""}, {"v2", "v2", ""}, {"v3", "v3", ""}, {"reader", "shared", "node-2"}, {"writer", "w", "node-2"},
		{"zonal", "z2", ""}, {"nowhere", "z9", ""},
	} {
		p := c.volumePod(ns, podSpec{name: s.name, gpus: 1}, s.claim)
		if s.node != "" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": s.node}
		}
		pending = append(pending, p)
	}
	c.create(ns, append([]*corev1.Pod{occupant}, pending...)...)
	defer func() {
		if t.Failed() {
			for _, p := range c.pods(ns) {
				t.Logf("%s on %q", p.Name, p.Spec.NodeName)
			}
		}
	}()
	c.startJudged()
	onNode1 := func() (on []string, rest []string) {
		for _, name := range []string{"v1", "v2", "v3"} {
			switch n := c.get(ns, name).Spec.NodeName; n {
			case "node-1":
				on = append(on, name)
			case "":
				rest = append(rest, name)
			default:
				t.Errorf("%s bound to %s: its driver is not installed there, or the node is full", name, n)
			}
		}
		return on, rest
	}
	full := "0/4 nodes are available: 2 ebs.example.com CSI driver is not installed on the node, 2 node(s) exceed max volume count."
	waitFor(t, 60*time.Second, "one of v1..v3, reader and zonal bound", func() (bool, string) {
		on, _ := onNode1()
		r := c.get(ns, "reader")
		return len(on) == 1 && r.Spec.NodeName != "" && c.get(ns, "zonal").Spec.NodeName != "", fmt.Sprint(on, condition(r))
	})
	_, rest := onNode1()
	for _, name := range rest {
		t.Logf("%s: %s", name, c.waitCondition(ns, name, "Unschedulable", full, 30*time.Second))
	}
	if err := c.cs.StorageV1().VolumeAttachments().Delete(ctx, "va-old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a second of v1..v3 bound once node-1's VolumeAttachment is gone", func() (bool, string) {
		on, _ := onNode1()
		return len(on) == 2, fmt.Sprint(on)
	})
	_, rest = onNode1()
	for name, want := range map[string]string{
		rest[0]:   full,
		"writer":  "0/4 nodes are available: 1 node(s) exceed max volume count, 3 node(s) didn't match Pod's node affinity/selector.",
		"nowhere": "0/4 nodes are available: 4 node(s) had no available volume zone.",
	} {
		t.Logf("%s: %s", name, c.waitCondition(ns, name, "Unschedulable", want, 30*time.Second))
	}
	if n := c.get(ns, "reader").Spec.NodeName; n != "node-2" {
		t.Errorf("reader bound to %s, want node-2", n)
	}
	if n := c.get(ns, "zonal").Spec.NodeName; n != "node-3" && n != "node-4" {
		t.Errorf("zonal bound to %s, outside its volume's zone-2", n)
	}
	want := append(rest, "nowhere", "writer")
	sort.Strings(want)
	if u := c.unbound(ns); strings.Join(u, ",") != strings.Join(want, ",") {
		t.Errorf("unbound %v", u)
	}
}

// Pods that need a node feature (kube-scheduler's NodeDeclaredFeatures,
// GA in 1.37) go only to the nodes that declare it, judged by
// kube-scheduler: node-1 and node-2 declare RestartAllContainersOnContainerExits
// (kubelets as new as the control plane), node-3 and node-4 do not (older
// ones, mid-upgrade). Of three whole-node training pods whose containers
// restart together, two are bound to node-1 and node-2, the third told
// why (node-4, half taken by a running pod without the rule, lacks room
// first: NodeResourcesFit comes before the features). Once
// node-3 declares the feature (its kubelet upgraded), the third is bound
// there.
func TestPodsGoWhereTheirFeaturesAre(t *testing.T) { judged(t, 4, nodeFeatures) }

func nodeFeatures(c *cluster) {
	t := c.t
	ns := "features"
	ctx := context.Background()
	declare := func(node string) {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.DeclaredFeatures = []string{"RestartAllContainersOnContainerExits"}
		if _, err := c.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	declare("node-1")
	declare("node-2")
	never := corev1.ContainerRestartPolicyNever
	var pods []*corev1.Pod
	for _, name := range []string{"t1", "t2", "t3"} {
		p := c.buildPod(ns, podSpec{name: name, gpus: 8})
		p.Spec.Containers[0].RestartPolicy = &never
		p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
		pods = append(pods, p)
	}
	// A running pod without the rule holds half of node-4 from the start:
	// which of the pods kube-scheduler tries first then does not change
	// what it says of the third.
	plain := c.buildPod(ns, podSpec{name: "plain", gpus: 4})
	plain.Spec.NodeName = "node-4"
	c.create(ns, append(pods, plain)...)
	c.startJudged()
	var left string
	waitFor(t, 60*time.Second, "two of t1..t3 bound", func() (bool, string) {
		var on []string
		left = ""
		for _, name := range []string{"t1", "t2", "t3"} {
			switch n := c.get(ns, name).Spec.NodeName; n {
			case "":
				left = name
			default:
				on = append(on, n)
			}
		}
		sort.Strings(on)
		return strings.Join(on, ",") == "node-1,node-2", fmt.Sprint(on)
	})
	t.Logf("%s: %s", left, c.waitCondition(ns, left, "Unschedulable",
		"0/4 nodes are available: 1 node(s) didn't match Pod's required features, 3 Insufficient nvidia.com/gpu.", 30*time.Second))
	declare("node-3")
	waitFor(t, 60*time.Second, left+" bound once node-3 declares the feature", func() (bool, string) {
		n := c.get(ns, left).Spec.NodeName
		return n == "node-3", n
	})
}

// A pod resized in place holds what its kubelet has allocated it until
// the resize is done (kube-scheduler counts the larger of its spec and its
// status), judged by kube-scheduler: a running pod on node-1 (96 CPUs)
// shrunk from 80 CPUs to 16, its kubelet not yet done, leaves room for an
// 8-CPU pod but not a 40-CPU one, which is told why; once the kubelet has
// given the CPUs back (its status says 16), the 40-CPU pod is bound there.
func TestResizedPodsHoldTheirRoom(t *testing.T) { judged(t, 4, resizedPods) }

func resizedPods(c *cluster) {
	t := c.t
	ns := "resize"
	ctx := context.Background()
	c.create(ns)
	p := c.buildPod(ns, podSpec{name: "shrunk", cpu: "16"})
	p.Spec.NodeName = "node-1"
	p, err := c.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := func(cpu string) {
		q := resource.MustParse(cpu)
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: "none", Ready: true,
			AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: q},
			Resources:          &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q}}}}
		if p, err = c.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held("80")
	on1 := map[string]string{"kubernetes.io/hostname": "node-1"}
	c.create(ns, c.buildPod(ns, podSpec{name: "big", cpu: "40", selector: on1}), c.buildPod(ns, podSpec{name: "small", cpu: "8", selector: on1}))
	c.startJudged()
	c.waitBound(ns, 60*time.Second, "big")
	t.Logf("big: %s", c.waitCondition(ns, "big", "Unschedulable",
		"0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector.", 30*time.Second))
	held("16")
	c.waitBound(ns, 60*time.Second)
}

// A claim of access mode ReadWriteOncePod is one pod's at a time
// (kube-scheduler's VolumeRestrictions), judged by kube-scheduler: a
// running pod on node-1 uses "held", and the pending pod of it waits, told
// so; of two pending pods of "free", one is bound and the other waits; a
// pod of "late" that cannot be placed (16 GPUs) does not keep it from
// another, which is bound.
func TestReadWriteOncePodOnePodAtATime(t *testing.T) { judged(t, 4, oneAtATime) }

func oneAtATime(c *cluster) {
	t := c.t
	ns := "rwop"
	c.create(ns)
	for _, claim := range []string{"held", "free", "late"} {
		c.volumeClaim(ns, claim, "late", string(corev1.ReadWriteOncePod))
		c.bindVolumeClaim(ns, claim)
	}
	holder := c.volumePod(ns, podSpec{name: "holder", gpus: 1}, "held")
	holder.Spec.NodeName = "node-1"
	c.create(ns, holder, c.volumePod(ns, podSpec{name: "stuck", gpus: 16}, "late"))
	time.Sleep(1100 * time.Millisecond) // stuck older than next, by its creation's second
	c.create(ns, c.volumePod(ns, podSpec{name: "h1", gpus: 1}, "held"), c.volumePod(ns, podSpec{name: "f1", gpus: 1}, "free"),
		c.volumePod(ns, podSpec{name: "f2", gpus: 1}, "free"), c.volumePod(ns, podSpec{name: "next", gpus: 1}, "late"))
	c.startJudged()
	var waiting string
	waitFor(t, 60*time.Second, "one of f1 and f2, and next, bound", func() (bool, string) {
		f1, f2 := c.get(ns, "f1").Spec.NodeName, c.get(ns, "f2").Spec.NodeName
		waiting = "f1"
		if f1 != "" {
			waiting = "f2"
		}
		return (f1 == "") != (f2 == "") && c.get(ns, "next").Spec.NodeName != "", f1 + "," + f2
	})
	for _, name := range []string{"h1", waiting} {
		t.Logf("%s: %s", name, c.waitCondition(ns, name, "Unschedulable",
			"0/4 nodes are available: 4 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod.", 30*time.Second))
	}
	want := []string{"h1", "stuck", waiting}
	sort.Strings(want)
	if u := c.unbound(ns); strings.Join(u, ",") != strings.Join(want, ",") {
		t.Errorf("unbound %v, want %v", u, want)
	}
}

// An in-tree disk named in a pod (VolumeRestrictions' disk conflicts) is
// one node's pod's unless all mount it read-only, judged by
// kube-scheduler: a running pod on node-2 mounts EBS volume vol-x, and a
// pod pinned to node-2 mounting it waits, told so; two pods mounting
// vol-y go to two nodes; two mounting one GCE PD read-only may share one.
func TestInTreeDisksNotShared(t *testing.T) { judged(t, 4, inTreeDisks) }

func inTreeDisks(c *cluster) {
	t := c.t
	ns := "disks"
	ebs := func(p *corev1.Pod, id string) *corev1.Pod {
		p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: id}}}}
		return p
	}
	pd := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "ro", ReadOnly: true}}}}
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-4"}
		return p
	}
	holder := ebs(c.buildPod(ns, podSpec{name: "holder", gpus: 1}), "vol-x")
	holder.Spec.NodeName = "node-2"
	c.create(ns, holder, ebs(c.buildPod(ns, podSpec{name: "x", gpus: 1, selector: map[string]string{"kubernetes.io/hostname": "node-2"}}), "vol-x"),
		ebs(c.buildPod(ns, podSpec{name: "y1", gpus: 1}), "vol-y"), ebs(c.buildPod(ns, podSpec{name: "y2", gpus: 1}), "vol-y"),
		pd(c.buildPod(ns, podSpec{name: "ro1", gpus: 1})), pd(c.buildPod(ns, podSpec{name: "ro2", gpus: 1})))
	c.startJudged()
	c.waitBound(ns, 60*time.Second, "x")
	if y1, y2 := c.get(ns, "y1").Spec.NodeName, c.get(ns, "y2").Spec.NodeName; y1 == y2 {
		t.Errorf("y1 and y2, of one EBS volume, both on %s", y1)
	}
	t.Logf("x: %s", c.waitCondition(ns, "x", "Unschedulable",
		"0/4 nodes are available: 1 node(s) had no available disk, 3 node(s) didn't match Pod's node affinity/selector.", 30*time.Second))
}

// ---------------------------------------------------------------- 3: partial placements

// Five pods of one ReplicaSet with required anti-affinity on the hostname
// and three nodes they may use: three are bound (a partial placement is
// bound), the other two wait, told why. Judged by kube-scheduler.
func TestPartialPlacementsBound(t *testing.T) { judged(t, 8, partialPlacements) }

func partialPlacements(c *cluster) {
	t := c.t
	ns := "partial"
	var pods []*corev1.Pod
	for i := 0; i < 5; i++ {
		p := pinned(c.buildPod(ns, podSpec{name: fmt.Sprintf("web-%d", i), gpus: 1}), hosts(1, 3)...)
		p.Labels["app"] = "web"
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-web", Controller: ptrTo(true)}}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}
		pods = append(pods, p)
	}
	c.create(ns, pods...)
	c.startJudged()
	var boundTo []string
	waitFor(t, 60*time.Second, "three of the five bound", func() (bool, string) {
		boundTo = nil
		for _, p := range c.pods(ns) {
			if p.Spec.NodeName != "" {
				boundTo = append(boundTo, p.Spec.NodeName)
			}
		}
		return len(boundTo) >= 3, fmt.Sprint(boundTo)
	})
	sort.Strings(boundTo)
	if strings.Join(boundTo, ",") != "node-1,node-2,node-3" {
		t.Errorf("bound to %v, want one on each of node-1..3", boundTo)
	}
	for _, name := range c.unbound(ns) {
		msg := c.waitCondition(ns, name, "Unschedulable", "node(s) didn't match pod anti-affinity rules", 30*time.Second)
		t.Logf("%s: %s", name, msg)
	}
	if u := c.unbound(ns); len(u) != 2 {
		t.Errorf("unbound %v", u)
	}
	c.checkCapacity()
}

func ptrTo[T any](v T) *T { return &v }

// ---------------------------------------------------------------- 2: the queue

// 3,000 pods that can never be placed are queued first: a pod created
// after them that fits is bound within two cycles (the round holds the pods
// worth trying: those not tried yet first, the rest backing off), the
// high-priority one no later than the other, and no Binding is tried for
// the backlog.
func TestBacklogDoesNotFreezeTheQueue(t *testing.T) {
	c := newCluster(t, 16, 0)
	c.priorityClass("high", 1000)
	url := c.startSchedulerMetrics()
	ns := "backlog"
	c.create(ns)
	const backlog = 3000
	start := time.Now()
	c.createBacklog(ns, backlog)
	t.Logf("%d unplaceable pods created in %.1f s", backlog, time.Since(start).Seconds())
	c.waitBacklogTried(url, backlog)
	c0 := metric(scrape(url), "placer_k8s_scheduling_cycles_total")
	created := time.Now()
	c.createPods(ns, podSpec{name: "late-low", gpus: 1}, podSpec{name: "late-high", gpus: 1, priority: "high"})
	waitFor(t, 60*time.Second, "the late pods bound", func() (bool, string) {
		a, b := c.get(ns, "late-low"), c.get(ns, "late-high")
		return a.Spec.NodeName != "" && b.Spec.NodeName != "", fmt.Sprintf("late-low on %q, late-high on %q", a.Spec.NodeName, b.Spec.NodeName)
	})
	cycles := c.recordedCycles()
	low, high := cycles[ns+"/late-low"], cycles[ns+"/late-high"]
	t.Logf("created after cycle %v; bound in cycles %d (low) and %d (high), %.1f s after creation", c0, low, high, time.Since(created).Seconds())
	if float64(low) > c0+2 || float64(high) > c0+2 {
		t.Errorf("bound in cycles %d and %d, created after cycle %v: more than two cycles", low, high, c0)
	}
	if high > low {
		t.Errorf("the high-priority pod bound after the low one (cycles %d, %d)", high, low)
	}
	page := scrape(url)
	if e := metric(page, "placer_k8s_bind_errors_total"); e != 0 {
		t.Errorf("%v Bindings refused", e)
	}
	if b := metric(page, "placer_k8s_pods_backing_off"); b <= 0 {
		t.Errorf("no pod backing off (%v): the backlog is tried every cycle", b)
	}
	msg := c.waitCondition(ns, "never-0000", "Unschedulable", "It can never run on this cluster", 60*time.Second)
	t.Logf("never-0000: %s", msg)
}

// ---------------------------------------------------------------- 4: gangs

func (c *cluster) podGroupCRD() {
	ctx := context.Background()
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "podgroups.scheduling.x-k8s.io"},
		"spec": map[string]any{"group": "scheduling.x-k8s.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "listKind": "PodGroupList"},
			"versions": []any{map[string]any{"name": "v1alpha1", "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema":       map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}
	body, _ := json.Marshal(crd)
	if err := c.cs.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil {
		c.t.Fatal(err)
	}
	c.waitServed(&unstructured.Unstructured{Object: crd}) // the scheduler asks discovery once, at its start
}

func (c *cluster) podGroup(ns, name string, spec map[string]any) {
	body, _ := json.Marshal(map[string]any{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec})
	deadline := time.Now().Add(30 * time.Second)
	for { // until the CRD is established
		err := c.cs.Discovery().RESTClient().Post().AbsPath("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/"+ns+"/podgroups").
			Body(body).SetHeader("Content-Type", "application/json").Do(context.Background()).Error()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("creating PodGroup %s: %v", name, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (c *cluster) podGroupStatus(ns, name string) map[string]any {
	b, err := c.cs.Discovery().RESTClient().Get().AbsPath("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/" + ns + "/podgroups/" + name).DoRaw(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	var o map[string]any
	_ = json.Unmarshal(b, &o)
	s, _ := o["status"].(map[string]any)
	return s
}

// Coscheduling's meaning: minMember 4 of 8 with room for 6 binds 6; a
// launcher and its workers, of different sizes, are one gang; the
// PodGroup's status shows its phase and scheduled count; members that wait
// past scheduleTimeoutSeconds are told so; PodGroups come from an
// informer: the API server sees no PodGroup read once the scheduler is
// idle.
func TestCoschedulingGangs(t *testing.T) {
	c := newCluster(t, 16, 0)
	c.podGroupCRD()
	ns := "gangs"
	c.create(ns)
	c.podGroup(ns, "wide", map[string]any{"minMember": 4})
	c.podGroup(ns, "mpi", map[string]any{"minMember": 5})
	c.podGroup(ns, "late", map[string]any{"minMember": 3, "scheduleTimeoutSeconds": 3})
	var pods []*corev1.Pod
	for i := 0; i < 8; i++ {
		pods = append(pods, pinned(c.buildPod(ns, podSpec{name: fmt.Sprintf("wide-%d", i), group: "wide", gpus: 8}), hosts(1, 6)...))
	}
	pods = append(pods, pinned(c.buildPod(ns, podSpec{name: "mpi-launcher", group: "mpi", cpu: "2"}), hosts(7, 12)...))
	for i := 0; i < 4; i++ {
		pods = append(pods, pinned(c.buildPod(ns, podSpec{name: fmt.Sprintf("mpi-worker-%d", i), group: "mpi", gpus: 8, cpu: "16"}), hosts(7, 12)...))
	}
	for i := 0; i < 3; i++ { // room for 2
		pods = append(pods, pinned(c.buildPod(ns, podSpec{name: fmt.Sprintf("late-%d", i), group: "late", gpus: 8}), hosts(13, 14)...))
	}
	c.create(ns, pods...)
	url := c.startSchedulerMetrics()
	waitFor(t, 90*time.Second, "6 of wide and all of mpi bound", func() (bool, string) {
		n := map[string]int{}
		for _, p := range c.pods(ns) {
			if p.Spec.NodeName != "" {
				n[p.Labels["scheduling.x-k8s.io/pod-group"]]++
			}
		}
		return n["wide"] == 6 && n["mpi"] == 5, fmt.Sprint(n)
	})
	for _, p := range c.pods(ns) {
		if strings.HasPrefix(p.Name, "late-") && p.Spec.NodeName != "" {
			t.Errorf("%s of the gang late bound to %s: its minMember 3 does not fit", p.Name, p.Spec.NodeName)
		}
	}
	waitFor(t, 30*time.Second, "PodGroup statuses", func() (bool, string) {
		w, m := c.podGroupStatus(ns, "wide"), c.podGroupStatus(ns, "mpi")
		return fmt.Sprintf("%v %v %v %v", w["phase"], w["scheduled"], m["phase"], m["scheduled"]) == "Scheduling 6 Scheduling 5", fmt.Sprintf("wide %v, mpi %v", w, m)
	})
	for _, p := range c.pods(ns) {
		if strings.HasPrefix(p.Name, "wide-") && p.Spec.NodeName == "" {
			t.Logf("%s: %s", p.Name, c.waitCondition(ns, p.Name, "Unschedulable", "0/16 nodes are available", 30*time.Second))
		}
	}
	msg := c.waitCondition(ns, "late-0", "Unschedulable", "was not scheduled within its scheduleTimeoutSeconds (3 s", 60*time.Second)
	t.Logf("late-0: %s", msg)
	if s := c.podGroupStatus(ns, "late"); s["phase"] != "Pending" || s["scheduleStartTime"] == nil {
		t.Errorf("late's status %v", s)
	}
	// Idle: the gang late waits (backing off); the API server sees no
	// PodGroup read, and the scheduler no request but watches and its Lease.
	time.Sleep(2 * time.Second)
	gets := metric(c.apiserverMetrics(), `apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.x-k8s.io",resource="podgroups",scope="resource",subresource="",verb="GET"`)
	requests := func() float64 {
		page := scrape(url)
		total := 0.0
		for _, line := range strings.Split(page, "\n") {
			if strings.HasPrefix(line, "placer_k8s_api_requests_total{") && !strings.Contains(line, `verb="WATCH"`) && !strings.Contains(line, `resource="leases"`) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				total += v
			}
		}
		return total
	}
	r0 := requests()
	time.Sleep(12 * time.Second) // past the longest back-off: the gang is tried again in the meantime
	if g := metric(c.apiserverMetrics(), `apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.x-k8s.io",resource="podgroups",scope="resource",subresource="",verb="GET"`); g > gets {
		t.Errorf("%v PodGroup GETs while idle", g-gets)
	}
	if r := requests(); r != r0 {
		t.Errorf("%v API requests while idle", r-r0)
	}
	c.checkCapacity()
}

// ---------------------------------------------------------------- 5: affinity and spread

// Required pod affinity and anti-affinity on any key, symmetric as
// kube-scheduler applies them, and topology spread (DoNotSchedule), solved
// in Placer's rounds and explained in kube-scheduler's words. Judged by
// kube-scheduler (zones: node-1..4 zone-1, node-5..8 zone-2).
func TestPodAffinityAndSpread(t *testing.T) { judged(t, 8, affinityAndSpread) }

func affinityAndSpread(c *cluster) {
	t := c.t
	ns := "rules"
	antiOn := func(p *corev1.Pod, key string, match map[string]string) *corev1.Pod {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: match}}}}
		return p
	}
	// A pod already running with anti-affinity against app=noisy on its node.
	guard := antiOn(c.buildPod(ns, podSpec{name: "guard", gpus: 1, selector: map[string]string{"kubernetes.io/hostname": "node-1"}}),
		"kubernetes.io/hostname", map[string]string{"app": "noisy"})
	c.create(ns, guard)
	c.startJudged()
	c.waitBound(ns, 60*time.Second)
	var pods []*corev1.Pod
	for i := 0; i < 4; i++ { // one a zone
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("db-%d", i), gpus: 1})
		p.Labels["app"] = "db"
		pods = append(pods, antiOn(p, "topology.kubernetes.io/zone", map[string]string{"app": "db"}))
	}
	noisy := pinned(c.buildPod(ns, podSpec{name: "noisy", gpus: 1}), "node-1", "node-2")
	noisy.Labels["app"] = "noisy"
	pods = append(pods, noisy)
	cache := c.buildPod(ns, podSpec{name: "cache", gpus: 2})
	cache.Labels["app"] = "cache"
	web := c.buildPod(ns, podSpec{name: "web", gpus: 1})
	web.Labels["app"] = "web"
	web.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}}}}}
	pods = append(pods, web, cache)
	for i := 0; i < 6; i++ {
		p := c.buildPod(ns, podSpec{name: fmt.Sprintf("spread-%d", i), gpus: 1})
		p.Labels["app"] = "spread"
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		pods = append(pods, p)
	}
	c.create(ns, pods...)
	zone := func(node string) string {
		var i int
		fmt.Sscanf(node, "node-%d", &i)
		return fmt.Sprintf("zone-%d", (i-1)/4+1)
	}
	var ps []corev1.Pod
	waitFor(t, 90*time.Second, "all but two db pods bound", func() (bool, string) {
		ps = c.pods(ns)
		var u []string // (of the same look as ps: kube-scheduler binds one pod at a time)
		for _, p := range ps {
			if p.Spec.NodeName == "" {
				u = append(u, p.Name)
			}
		}
		return len(u) == 2 && strings.HasPrefix(u[0], "db-") && strings.HasPrefix(u[1], "db-"), fmt.Sprint(u)
	})
	at := map[string]string{}
	perZone := map[string]map[string]int{}
	for _, p := range ps {
		at[p.Name] = p.Spec.NodeName
		if p.Spec.NodeName != "" {
			if perZone[p.Labels["app"]] == nil {
				perZone[p.Labels["app"]] = map[string]int{}
			}
			perZone[p.Labels["app"]][zone(p.Spec.NodeName)]++
		}
	}
	if at["noisy"] != "node-2" {
		t.Errorf("noisy on %q: guard's anti-affinity keeps it off node-1", at["noisy"])
	}
	if at["web"] != at["cache"] {
		t.Errorf("web on %s, cache on %s", at["web"], at["cache"])
	}
	if d := perZone["db"]; d["zone-1"] != 1 || d["zone-2"] != 1 {
		t.Errorf("db per zone %v", d)
	}
	if s := perZone["spread"]; s["zone-1"] != 3 || s["zone-2"] != 3 {
		t.Errorf("spread per zone %v", s)
	}
	for _, name := range c.unbound(ns) {
		msg := c.waitCondition(ns, name, "Unschedulable", "0/8 nodes are available: 8 node(s) didn't match pod anti-affinity rules.", 30*time.Second)
		t.Logf("%s: %s", name, msg)
	}
	c.checkCapacity()
}

// ---------------------------------------------------------------- 7: operations

// Conditions move lastTransitionTime only when their status changes;
// messages say "placer:" once and taints as kube-scheduler does; the
// gauges go back to 0; a histogram of scheduling latency; /livez fails
// when the leader's loop is stuck.
func TestConditionsGaugesAndLiveness(t *testing.T) {
	c := newCluster(t, 16, 2)
	url := c.startSchedulerMetrics()
	ns := "ops"
	c.createPods(ns, podSpec{name: "g-0", group: "g", gpus: 8, minMember: 3}, podSpec{name: "fits", gpus: 1},
		podSpec{name: "taints", gpus: 1, hosts: []string{"node-15", "node-16"}})
	first := c.waitCondition(ns, "g-0", "Unschedulable", "1 of its minMember 3 pods exist", 30*time.Second)
	since := condition(c.get(ns, "g-0")).LastTransitionTime
	time.Sleep(1100 * time.Millisecond) // a later second
	c.createPods(ns, podSpec{name: "g-1", group: "g", gpus: 8, minMember: 3})
	second := c.waitCondition(ns, "g-0", "Unschedulable", "2 of its minMember 3 pods exist", 30*time.Second)
	if cd := condition(c.get(ns, "g-0")); !cd.LastTransitionTime.Equal(&since) {
		t.Errorf("lastTransitionTime moved from %v to %v with the message (%q -> %q)", since, cd.LastTransitionTime, first, second)
	}
	msg := c.waitCondition(ns, "taints", "Unschedulable", "2 node(s) had untolerated taint {dedicated: infer}", 30*time.Second)
	if !strings.Contains(msg, "14 node(s) didn't match Pod's node affinity/selector") {
		t.Errorf("taints: %q", msg)
	}
	for _, p := range c.pods(ns) {
		if cd := condition(&p); cd != nil && regexp.MustCompile(`placer:.*placer:`).MatchString(cd.Message) {
			t.Errorf("%s: %q", p.Name, cd.Message)
		}
	}
	waitFor(t, 30*time.Second, "gauges while pods wait", func() (bool, string) {
		page := scrape(url)
		return metric(page, "placer_k8s_pods_unschedulable") == 3 && metric(page, "placer_k8s_pods_pending") == 3,
			fmt.Sprint(metric(page, "placer_k8s_pods_unschedulable"), metric(page, "placer_k8s_pods_pending"))
	})
	for _, name := range []string{"g-0", "g-1", "taints"} {
		if err := c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "gauges back to 0", func() (bool, string) {
		page := scrape(url)
		return metric(page, "placer_k8s_pods_unschedulable") == 0 && metric(page, "placer_k8s_pods_pending") == 0,
			fmt.Sprint(metric(page, "placer_k8s_pods_unschedulable"), metric(page, "placer_k8s_pods_pending"))
	})
	if n := metric(scrape(url), "placer_k8s_pod_scheduling_seconds_count"); n != 1 {
		t.Errorf("scheduling latency observations: %v, want 1 (the pod fits)", n)
	}
	// A leader stuck in a cycle (its bindings held 60 s) fails /livez
	// past --livez-bound; a standby does not lead, and stays live.
	c.stopScheduler(syscall.SIGTERM)
	live := strings.TrimSuffix(c.startSchedulerMetrics("--test-bind-delay", "60s", "--livez-bound", "3s"), "/metrics") + "/livez"
	waitHTTP(t, live, 200, 30*time.Second)
	c.createPods(ns, podSpec{name: "stuck", gpus: 1})
	waitHTTP(t, live, 503, 60*time.Second)
	t.Logf("/livez: %s", strings.TrimSpace(scrape(live)))
}

// The Lease Role is scoped to the scheduler's own Lease.
func TestLeaseRoleScoped(t *testing.T) {
	c := newCluster(t, 2, 0)
	// What it may do first, each asked until the authorizer has read the
	// grants; then what it may not, against grants known to be read.
	for _, verb := range []string{"get", "update"} {
		if !c.canSoon("placer-scheduler", verb, "coordination.k8s.io", "leases", "kube-system", "placer-scheduler") {
			t.Errorf("placer-scheduler may not %s lease placer-scheduler", verb)
		}
	}
	for _, r := range []struct{ group, resource string }{{"scheduling.x-k8s.io", "podgroups"}, {"scheduling.k8s.io", "podgroups"}, {"", "persistentvolumeclaims"},
		{"", "persistentvolumes"}, {"storage.k8s.io", "storageclasses"}, {"storage.k8s.io", "csistoragecapacities"}} {
		if !c.canSoon("placer-scheduler", "watch", r.group, r.resource, "default", "") {
			t.Errorf("placer-scheduler may not watch %s", r.resource)
		}
	}
	for _, verb := range []string{"get", "update"} {
		if c.can("placer-scheduler", verb, "coordination.k8s.io", "leases", "kube-system", "kube-scheduler") {
			t.Errorf("placer-scheduler may %s lease kube-scheduler", verb)
		}
	}
	if c.can("placer-scheduler", "patch", "", "pods", "default", "") {
		t.Errorf("placer-scheduler may patch pods (the GPU index travels in the Binding)")
	}
}

// canSoon: can, asked again for up to 30 s while the answer is no. The
// RBAC authorizer reads Roles and their bindings through informers of its
// own, so grants applied just before may not be seen yet (a loaded machine
// once answered the first review no and the next ones yes).
func (c *cluster) canSoon(user, verb, group, resource, ns, name string) bool {
	deadline := time.Now().Add(30 * time.Second)
	for !c.can(user, verb, group, resource, ns, name) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// can: a SubjectAccessReview.
func (c *cluster) can(user, verb, group, resource, ns, name string) bool {
	body, _ := json.Marshal(map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{"user": user, "resourceAttributes": map[string]any{"verb": verb, "group": group, "resource": resource,
			"namespace": ns, "name": name}}})
	b, err := c.cs.Discovery().RESTClient().Post().AbsPath("/apis/authorization.k8s.io/v1/subjectaccessreviews").
		Body(body).SetHeader("Content-Type", "application/json").DoRaw(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	var r struct {
		Status struct{ Allowed bool } `json:"status"`
	}
	_ = json.Unmarshal(b, &r)
	return r.Status.Allowed
}

// ---------------------------------------------------------------- 6: informers

// Node changes and deletions reach the next round: a label added, a
// cordon lifted, more GPUs, a node deleted.
func TestNodeChangesReachTheNextRound(t *testing.T) {
	c := newCluster(t, 8, 0)
	ctx := context.Background()
	nodes := c.cs.CoreV1().Nodes()
	n4, err := nodes.Get(ctx, "node-4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n4.Spec.Unschedulable = true
	if _, err := nodes.Update(ctx, n4, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx, "node-6", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.startScheduler()
	ns := "nodes"
	c.createPods(ns, podSpec{name: "needs-label", gpus: 1, selector: map[string]string{"accel": "fast"}},
		podSpec{name: "cordoned", gpus: 1, selector: map[string]string{"kubernetes.io/hostname": "node-4"}},
		podSpec{name: "gone", gpus: 1, selector: map[string]string{"kubernetes.io/hostname": "node-6"}},
		podSpec{name: "wide", gpus: 16, selector: map[string]string{"kubernetes.io/hostname": "node-7"}})
	c.waitCondition(ns, "needs-label", "Unschedulable", "0/7 nodes are available: 7 node(s) didn't match Pod's node affinity/selector.", 30*time.Second)
	c.waitCondition(ns, "cordoned", "Unschedulable", "1 node(s) were unschedulable", 30*time.Second)
	c.waitCondition(ns, "gone", "Unschedulable", "0/7 nodes are available: 7 node(s) didn't match Pod's node affinity/selector.", 30*time.Second)
	c.waitCondition(ns, "wide", "Unschedulable", "1 Insufficient nvidia.com/gpu", 30*time.Second)
	n3, err := nodes.Get(ctx, "node-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n3.Labels["accel"] = "fast"
	if _, err := nodes.Update(ctx, n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n4, _ = nodes.Get(ctx, "node-4", metav1.GetOptions{})
	n4.Spec.Unschedulable = false
	if _, err := nodes.Update(ctx, n4, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n7, _ := nodes.Get(ctx, "node-7", metav1.GetOptions{})
	n7.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("16")
	n7.Status.Capacity["nvidia.com/gpu"] = resource.MustParse("16")
	if _, err := nodes.UpdateStatus(ctx, n7, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ps := c.waitBound(ns, 60*time.Second, "gone") // within the longest back-off of the change
	for _, p := range ps {
		want := map[string]string{"needs-label": "node-3", "cordoned": "node-4", "wide": "node-7", "gone": ""}[p.Name]
		if p.Spec.NodeName != want {
			t.Errorf("%s on %q, want %q", p.Name, p.Spec.NodeName, want)
		}
	}
	c.checkCapacity()
}

// createBacklog creates n pods no node can hold (16 GPUs on nodes of 8),
// never-0000..., from 16 goroutines.
func (c *cluster) createBacklog(ns string, n int) {
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := c.buildPod(ns, podSpec{name: fmt.Sprintf("never-%04d", i), gpus: 16, cpu: "1"})
				if _, err := c.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					c.t.Errorf("creating %s: %v", p.Name, err)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}

// waitBacklogTried waits until the scheduler has reported n pods unschedulable.
func (c *cluster) waitBacklogTried(url string, n int) {
	waitFor(c.t, 180*time.Second, "the scheduler tried the backlog", func() (bool, string) {
		v := metric(scrape(url), "placer_k8s_pods_unschedulable")
		return v >= float64(n), fmt.Sprintf("%v unschedulable", v)
	})
}
