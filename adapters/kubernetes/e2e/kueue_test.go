package e2e

// Kueue's queues (docs/kubernetes.md, "Under Kueue"): Kueue's own CRDs
// (scripts/kueue.sh, from its Go module), its objects written as its users
// and its controller write them.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const queueLabel = "kueue.x-k8s.io/queue-name"

// installKueueCRDs: Kueue's ResourceFlavor, ClusterQueue and LocalQueue
// CRDs, established (skipped where its module cannot be downloaded).
func (c *cluster) installKueueCRDs() {
	c.t.Helper()
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "scripts/kueue.sh"), "crds").Output()
	if err != nil {
		c.t.Skipf("Kueue's CRDs: scripts/kueue.sh crds: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	var crds []manifest
	for _, kind := range []string{"resourceflavors", "clusterqueues", "localqueues"} {
		f := filepath.Join(dir, "kueue.x-k8s.io_"+kind+".yaml")
		b, err := os.ReadFile(f)
		if err != nil {
			c.t.Fatal(err)
		}
		crds = append(crds, yamlObjects(c.t, f, b)...)
	}
	c.applyObjects("default", crds)
	oc := c.objectClient()
	for _, m := range crds {
		r, err := oc.resource(m.obj, "")
		if err != nil {
			c.t.Fatal(err)
		}
		waitFor(c.t, 30*time.Second, "CRD "+m.obj.GetName()+" established", func() (bool, string) {
			u, err := r.Get(context.Background(), m.obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cd := range conds {
				if m, _ := cd.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, ""
				}
			}
			return false, fmt.Sprint(conds)
		})
		c.waitServed(m.obj)
	}
}

// waitServed waits until the apiserver's discovery lists the CRD's
// resource in each served version: Established, and even serving the
// CRD's objects, can come before the discovery document has it. A
// RESTMapper built in that gap answers "no matches for kind", and a
// scheduler started in it does not see the kind.
func (c *cluster) waitServed(crd *unstructured.Unstructured) {
	c.t.Helper()
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if served, _ := m["served"].(bool); !served {
			continue
		}
		gv := group + "/" + fmt.Sprint(m["name"])
		waitFor(c.t, 30*time.Second, plural+" served in discovery's "+gv, func() (bool, string) {
			l, err := c.cs.Discovery().ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, err.Error()
			}
			for _, r := range l.APIResources {
				if r.Name == plural {
					return true, ""
				}
			}
			return false, fmt.Sprint(len(l.APIResources), " resources")
		})
	}
}

// A ClusterQueue of its own, for a Job.
const soloQueue = `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: solo}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: solo}
spec: {clusterQueue: solo}
`

// With the docs' example queues (team-a and team-b, 4 H100s each, in
// cohort ml; team-b never borrows), pods admitted to them beyond their
// quotas (7 of team-a's, 5 of team-b's, one GPU each, with the flavor's
// node selector, as Kueue leaves them) all pending at the scheduler's
// start: its first round binds 4 of each (the cohort's 8), and the
// others are told QuotaExceeded, naming team-b's limit or the cohort's;
// the bound pods count in later rounds (none more bound); two of team-a's
// deleted, two more of team-a's are bound and none of team-b's. A pod still
// gated by Kueue and a suspended Job are left alone; the Job unsuspended
// as Kueue admits it (its flavor's node selector written into its
// template), its pods are bound in its ClusterQueue, which they fill: one
// more pod of that queue is refused.
func TestKueueQuotasHoldInARound(t *testing.T) {
	c := newClusterWith(t, clusterOpts{nodes: 4, controllers: "job-controller"})
	c.installKueueCRDs()
	ns := "kueue"
	c.applyObjects(ns, docsExample(t, "Kueue queues"))
	c.applyObjects(ns, yamlObjects(t, "soloQueue", []byte(soloQueue)))
	flavor := map[string]string{"nvidia.com/gpu.product": h100}
	admitted := func(name, lq string) *corev1.Pod {
		p := c.buildPod(ns, podSpec{name: name, gpus: 1, cpu: "1", selector: flavor})
		p.Labels[queueLabel] = lq
		return p
	}
	var pods []*corev1.Pod
	for i := 0; i < 7; i++ {
		pods = append(pods, admitted(fmt.Sprintf("a-%d", i), "team-a"))
	}
	for i := 0; i < 5; i++ {
		pods = append(pods, admitted(fmt.Sprintf("b-%d", i), "team-b"))
	}
	gated := admitted("gated", "team-a")
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	c.create(ns, append(pods, gated)...)
	job := c.createSuspendedJob(ns, "train", "solo", 2)
	url := c.startSchedulerMetrics()

	bound := func(prefix string) []string {
		var out []string
		for _, p := range c.pods(ns) {
			if p.Spec.NodeName != "" && strings.HasPrefix(p.Name, prefix) {
				out = append(out, p.Name)
			}
		}
		return out
	}
	waitFor(t, 60*time.Second, "the first round's 8 pods bound", func() (bool, string) {
		a, b := bound("a-"), bound("b-")
		return len(a)+len(b) >= 8, fmt.Sprint(a, b)
	})
	cycles := c.recordedCycles()
	first := -1
	for _, name := range append(bound("a-"), bound("b-")...) {
		if first >= 0 && cycles[ns+"/"+name] != first {
			t.Errorf("the first bindings in cycles %d and %d (%s)", first, cycles[ns+"/"+name], name)
		}
		first = cycles[ns+"/"+name]
	}
	for _, name := range []string{"a-4", "a-5", "a-6"} {
		c.waitCondition(ns, name, "Unschedulable", "QuotaExceeded: queue 'cohort/ml' holds 8000 of its 8000 milli-GPU limit; this job needs 1000", 30*time.Second)
	}
	c.waitCondition(ns, "b-4", "Unschedulable", "QuotaExceeded: queue 'team-b' holds 4000 of its 4000 milli-GPU limit; this job needs 1000", 30*time.Second)
	// Later rounds (the refused pods' retries) count what is bound.
	r0 := metric(scrape(url), "placer_k8s_placer_rounds_total")
	waitFor(t, 60*time.Second, "two more rounds", func() (bool, string) {
		r := metric(scrape(url), "placer_k8s_placer_rounds_total")
		return r >= r0+2, fmt.Sprint(r)
	})
	if a, b := bound("a-"), bound("b-"); len(a) != 4 || len(b) != 4 {
		t.Fatalf("bound %v and %v: want 4 of each queue, the cohort's 8 and team-b's 4", a, b)
	}
	// Two of team-a's finish: the cohort has room for two, team-b none.
	for _, name := range bound("a-")[:2] {
		if err := c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "two more of team-a's bound", func() (bool, string) {
		a := bound("a-")
		return len(a) == 4, fmt.Sprint(a)
	})
	r0 = metric(scrape(url), "placer_k8s_placer_rounds_total")
	waitFor(t, 60*time.Second, "two more rounds", func() (bool, string) {
		r := metric(scrape(url), "placer_k8s_placer_rounds_total")
		return r >= r0+2, fmt.Sprint(r)
	})
	if a, b := bound("a-"), bound("b-"); len(a) != 4 || len(b) != 4 {
		t.Fatalf("after two of team-a's went: bound %v and %v, want 4 of each", a, b)
	}
	// The suspended Job has no pods, the gated pod is left alone.
	if ps := c.jobPods(ns, job); len(ps) != 0 {
		t.Fatalf("the suspended Job has pods %v", ps)
	}
	if p := c.get(ns, "gated"); p.Spec.NodeName != "" || (condition(p) != nil && condition(p).Reason != "SchedulingGated") {
		t.Fatalf("the gated pod: node %q, condition %+v", p.Spec.NodeName, condition(p))
	}
	// Kueue admits the Job: its flavor's node selector, then suspend off.
	j, err := c.cs.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j.Spec.Template.Spec.NodeSelector = flavor
	j.Spec.Suspend = new(bool)
	if _, err := c.cs.BatchV1().Jobs(ns).Update(context.Background(), j, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("admitting the Job as Kueue would: %v", err)
	}
	waitFor(t, 60*time.Second, "the Job's two pods bound", func() (bool, string) {
		ps := c.jobPods(ns, job)
		n := 0
		for _, p := range ps {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d pods, %d bound", len(ps), n)
	})
	labels := nodeLabels(c)
	for _, p := range c.jobPods(ns, job) {
		if labels[p.Spec.NodeName]["nvidia.com/gpu.product"] != h100 {
			t.Errorf("the Job's pod %s on %s, not an H100 node", p.Name, p.Spec.NodeName)
		}
	}
	c.create(ns, admitted("solo-more", "solo"))
	c.waitCondition(ns, "solo-more", "Unschedulable", "QuotaExceeded: queue 'solo' holds 2000 of its 2000 milli-GPU limit; this job needs 1000", 30*time.Second)
	if p := c.get(ns, "gated"); p.Spec.NodeName != "" {
		t.Errorf("the gated pod was bound to %s", p.Spec.NodeName)
	}
	if e := metric(scrape(url), "placer_k8s_bind_errors_total"); e != 0 {
		t.Errorf("%v Bindings refused", e)
	}
	c.checkCapacity()
}

// createSuspendedJob: a batch Job of `n` pods of one GPU each
// in LocalQueue lq, suspended, as Kueue's users submit one.
func (c *cluster) createSuspendedJob(ns, name, lq string, n int32) string {
	c.t.Helper()
	tmpl := c.buildPod(ns, podSpec{name: name, gpus: 1, cpu: "1"})
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{queueLabel: lq}},
		Spec: batchv1.JobSpec{Parallelism: &n, Completions: &n, Suspend: func() *bool { b := true; return &b }(),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: tmpl.Spec}}}
	if _, err := c.cs.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating Job %s: %v", name, err)
	}
	return name
}

// jobPods: the pods of Job `name` (the job controller's batch.kubernetes.io/job-name label).
func (c *cluster) jobPods(ns, name string) []corev1.Pod {
	l, err := c.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil {
		c.t.Fatal(err)
	}
	return l.Items
}

// Kueue installed after the scheduler started (or its CRDs not yet in
// discovery then): the scheduler asks again (--rediscover) and, once
// it reads the queues, holds their quotas. Four pods admitted to team-b
// (4 H100s, never borrowing) are bound; two more (created after a cycle
// has bound those, so the queues, created before the scheduler read them,
// are in its cache whatever the informer's order) are told QuotaExceeded.
func TestKueueInstalledAfterTheScheduler(t *testing.T) {
	c := newClusterWith(t, clusterOpts{nodes: 4})
	c.startScheduler("--rediscover", "500ms")
	waitFor(t, 30*time.Second, "the scheduler started without Kueue", func() (bool, string) {
		return strings.Contains(c.schedulerLog(), "localqueues and clusterqueues not served"), ""
	})
	c.installKueueCRDs()
	ns := "kueue"
	c.applyObjects(ns, docsExample(t, "Kueue queues"))
	waitFor(t, 30*time.Second, "the scheduler reading Kueue's queues", func() (bool, string) {
		return strings.Contains(c.schedulerLog(), "Kueue's queues read"), ""
	})
	admit := func(from, to int) {
		var pods []*corev1.Pod
		for i := from; i < to; i++ {
			p := c.buildPod(ns, podSpec{name: fmt.Sprintf("b-%d", i), gpus: 1, cpu: "1",
				selector: map[string]string{"nvidia.com/gpu.product": h100}})
			p.Labels[queueLabel] = "team-b"
			pods = append(pods, p)
		}
		c.create(ns, pods...)
	}
	admit(0, 4)
	bound := func() []string {
		var out []string
		for _, p := range c.pods(ns) {
			if p.Spec.NodeName != "" {
				out = append(out, p.Name)
			}
		}
		return out
	}
	waitFor(t, 60*time.Second, "team-b's 4 bound", func() (bool, string) {
		b := bound()
		return len(b) >= 4, fmt.Sprint(b)
	})
	admit(4, 6)
	refused := 0
	for _, p := range c.pods(ns) {
		if p.Spec.NodeName == "" {
			c.waitCondition(ns, p.Name, "Unschedulable", "QuotaExceeded: queue 'team-b' holds 4000 of its 4000 milli-GPU limit; this job needs 1000", 30*time.Second)
			refused++
		}
	}
	if b := bound(); len(b) != 4 || refused != 2 {
		t.Fatalf("bound %v, %d refused: want team-b's 4 and 2 refused", b, refused)
	}
}
