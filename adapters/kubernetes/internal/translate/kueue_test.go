package translate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// object: a Kueue object as the API server returns it (JSON decoded into
// unstructured: integers as int64).
func object(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

func clusterQueue(t *testing.T, y string) *ClusterQueue {
	t.Helper()
	cq, err := ParseClusterQueue(object(t, y))
	if err != nil {
		t.Fatal(err)
	}
	return cq
}

// Kueue's examples' form (v1beta2): two resource groups, the GPU one with
// two flavors; memory is not Placer's to limit.
const teamA = `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohortName: ml
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 4}
    - name: a100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: "2", borrowingLimit: "1"}
`

const teamB = `
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohort: ml
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, cpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8, lendingLimit: 3, borrowingLimit: 0}
      - {name: cpu, nominalQuota: 500m}
`

const solo = `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: solo}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 2}
`

func TestClusterQueuesParsed(t *testing.T) {
	a := clusterQueue(t, teamA)
	if a.Name != "team-a" || a.Cohort != "ml" || len(a.Quotas) != 3 {
		t.Fatalf("team-a: %+v", a)
	}
	if q := a.Quotas[0]; q.Resource != corev1.ResourceCPU || q.Nominal != 64000 || q.Borrowing != nil || q.Lending != nil {
		t.Errorf("team-a's cpu: %+v", q)
	}
	if q := a.Quotas[2]; q.Flavor != "a100" || q.Nominal != 2000 || q.Borrowing == nil || *q.Borrowing != 1000 {
		t.Errorf("team-a's a100 GPUs: %+v", q)
	}
	b := clusterQueue(t, teamB) // v1beta1: spec.cohort
	if b.Cohort != "ml" || len(b.Quotas) != 2 || *b.Quotas[0].Lending != 3000 || *b.Quotas[0].Borrowing != 0 || b.Quotas[1].Nominal != 500 {
		t.Fatalf("team-b: %+v", b)
	}
	for _, bad := range []string{
		strings.Replace(solo, "nominalQuota: 2", "nominalQuota: lots", 1),
		strings.Replace(solo, "nominalQuota: 2", "nominalQuota: -2", 1),
		strings.Replace(solo, "{name: nvidia.com/gpu, nominalQuota: 2}", "{name: nvidia.com/gpu}", 1),
	} {
		if _, err := ParseClusterQueue(object(t, bad)); err == nil || !strings.Contains(err.Error(), "ClusterQueue solo: flavor h100") {
			t.Errorf("a bad quota: %v", err)
		}
	}
}

func queues(k *Kueue) map[string]wire.QueueT {
	out := map[string]wire.QueueT{}
	for _, q := range k.Tree() {
		out[q.Name] = *q
	}
	return out
}

// The tree: per ClusterQueue, guarantee = nominal quota summed over its
// flavors; limit = nominal, plus per flavor the smaller of its
// borrowingLimit and what the cohort's others lend; a cohort, a root
// limited to its members' nominal quotas.
func TestClusterQueuesAsPlacerQueues(t *testing.T) {
	k := NewKueue(nil, nil, []*ClusterQueue{clusterQueue(t, teamA), clusterQueue(t, teamB), clusterQueue(t, solo)})
	got := queues(k)
	want := map[string]wire.QueueT{
		// h100: 8 of team-b's, lent at most 3; a100: borrows at most 1, and
		// no one else has a100; cpu: team-b's is of another flavor.
		"team-a": {Name: "team-a", Parent: "cohort/ml", GpuMilliLimit: 4000 + 3000 + 2000 + 0, GpuMilliGuarantee: 6000,
			CpuMilliLimit: 64000, CpuMilliGuarantee: 64000, Weight: 1},
		// borrowingLimit 0: its nominal quota.
		"team-b": {Name: "team-b", Parent: "cohort/ml", GpuMilliLimit: 8000, GpuMilliGuarantee: 8000,
			CpuMilliLimit: 500, CpuMilliGuarantee: 500, Weight: 1},
		"cohort/ml": {Name: "cohort/ml", GpuMilliLimit: 14000, GpuMilliGuarantee: 14000, CpuMilliLimit: 64500, CpuMilliGuarantee: 64500, Weight: 1},
		"solo":      {Name: "solo", GpuMilliLimit: 2000, GpuMilliGuarantee: 2000, CpuMilliLimit: -1, Weight: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("queues %v", got)
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %+v, want %+v", n, got[n], w)
		}
	}
	// The round's copy is its own.
	k.Tree()[0].GpuMilliLimit = 1
	if queues(k)["cohort/ml"].GpuMilliLimit != 14000 {
		t.Error("a round's change reached the queues")
	}
}

func kueuePod(name, ns, lq string, gpus int64) *corev1.Pod {
	p := pod(name, gpus, "1")
	p.Namespace = ns
	if lq != "" {
		p.Labels[QueueLabel] = lq
	}
	return p
}

// A pod's queue is its LocalQueue's ClusterQueue; an unknown LocalQueue or
// ClusterQueue, or no label, is no queue; the pods bound in a queue are its
// use: running jobs that are not preemptible, or, where their requests are
// not inside their node's use, lowered limits.
func TestRoundCarriesKueueQueues(t *testing.T) {
	k := NewKueue(map[string]string{"research/main": "solo", "research/lost": "gone", "ml/a": "team-a"}, map[string]string{"ml/train": "a"},
		[]*ClusterQueue{clusterQueue(t, teamA), clusterQueue(t, teamB), clusterQueue(t, solo)})
	ofJob := func(p *corev1.Pod, job string) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job, UID: "j", Controller: ptr(true)}}
		return p
	}
	for _, c := range []struct {
		p    *corev1.Pod
		want string
	}{{kueuePod("x", "research", "main", 1), "solo"}, {kueuePod("x", "research", "lost", 1), ""},
		{kueuePod("x", "other", "main", 1), ""}, {kueuePod("x", "research", "", 1), ""}, {kueuePod("x", "ml", "a", 1), "team-a"},
		{ofJob(kueuePod("x", "ml", "", 1), "train"), "team-a"}, {ofJob(kueuePod("x", "ml", "", 1), "other"), ""},
		{ofJob(kueuePod("x", "research", "main", 1), "train"), "solo"}} {
		if q := k.QueueOf(c.p); q != c.want {
			t.Errorf("pod in %s of LocalQueue %q, owners %v: queue %q, want %q", c.p.Namespace, c.p.Labels[QueueLabel], c.p.OwnerReferences, q, c.want)
		}
	}
	held := kueuePod("held", "ml", "a", 2)
	held.Spec.NodeName = "n1"
	over := kueuePod("over", "ml", "a", 0) // more CPU than its node has: not a running job
	over.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resourceCount(200)
	over.Spec.NodeName = "n1"
	other := kueuePod("other", "research", "", 1)
	other.Spec.NodeName = "n1"
	nodes := []*corev1.Node{node("n1", "r1", 8)}
	pending := []*corev1.Pod{kueuePod("p1", "ml", "a", 1), kueuePod("p2", "research", "lost", 1)}
	r := build(nodes, []*corev1.Pod{held, over, other}, pending, Options{Kueue: k})
	if r.Request.Pending[0].Queue != "team-a" || r.Request.Pending[1].Queue != "" {
		t.Errorf("pending queues %q %q", r.Request.Pending[0].Queue, r.Request.Pending[1].Queue)
	}
	if len(r.Request.Running) != 1 {
		t.Fatalf("running jobs %d, want the held pod's alone", len(r.Request.Running))
	}
	rj := r.Request.Running[0]
	if rj.Name != "held/ml/held" || rj.Queue != "team-a" || rj.Preemptible || rj.Demand.Gpus != 2 || len(rj.Replicas) != 1 || len(rj.Replicas[0].Gpus) != 2 {
		t.Errorf("the held pod: %+v", rj)
	}
	got := map[string]*wire.QueueT{}
	for _, q := range r.Request.Queues {
		got[q.Name] = q
	}
	// "over" holds 200 cores (of team-a's 64 limit, the cohort's 64.5): both go to 0.
	if a, ml := got["team-a"], got["cohort/ml"]; a.CpuMilliLimit != 0 || a.CpuMilliGuarantee != 0 || ml.CpuMilliLimit != 0 || a.GpuMilliLimit != 9000 {
		t.Errorf("after the over-use: team-a %+v, cohort %+v", a, ml)
	}
	if len(r.Running) != 0 {
		t.Errorf("held pods are victims: %v", r.Running)
	}
	// Without Kueue: the label names the queue, no tree, no running jobs.
	r = build(nodes, []*corev1.Pod{held}, pending, Options{})
	if r.Request.Pending[0].Queue != "a" || len(r.Request.Queues) != 0 || len(r.Request.Running) != 0 {
		t.Errorf("without Kueue: queue %q, %d queues, %d running", r.Request.Pending[0].Queue, len(r.Request.Queues), len(r.Request.Running))
	}
}
