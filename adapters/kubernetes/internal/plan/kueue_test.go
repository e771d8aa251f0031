package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"placer.local/kubernetes/internal/translate"
)

// Two ClusterQueues of 4 GPUs in a cohort, team-b with no borrowing, one
// of team-b's pods bound: inside one round (a real Placer's) team-b's two
// pods are placed within its quota, and team-a borrows what the cohort
// has left, 5 of its 6 pods; the sixth is refused, naming the cohort's limit.
func TestKueueQuotasHoldInARound(t *testing.T) {
	solve := solver(t)
	zero := int64(0)
	k := translate.NewKueue(map[string]string{"ns/a": "team-a", "ns/b": "team-b"}, nil, []*translate.ClusterQueue{
		{Name: "team-a", Cohort: "ml", Quotas: []translate.Quota{{Flavor: "h100", Resource: translate.GPUResource, Nominal: 4000}}},
		{Name: "team-b", Cohort: "ml", Quotas: []translate.Quota{{Flavor: "h100", Resource: translate.GPUResource, Nominal: 4000, Borrowing: &zero}}},
	})
	in := func(p *corev1.Pod, lq string) *corev1.Pod { p.Labels[translate.QueueLabel] = lq; return p }
	running := in(pod("b-run", 1, "1", nil), "b")
	running.Spec.NodeName = "n01"
	var pending []*corev1.Pod
	for i := 0; i < 6; i++ {
		pending = append(pending, in(pod(fmt.Sprintf("a-%d", i), 1, "1", nil), "a"))
	}
	pending = append(pending, in(pod("b-0", 1, "1", nil), "b"), in(pod("b-1", 1, "1", nil), "b"))
	out := Run(Input{Nodes: nodes(2, 2), Bound: []*corev1.Pod{running}, Pending: pending, Now: time.Unix(2e9, 0), Rounds: 16, Solve: solve,
		Opt: translate.Options{TopologyLabels: []string{"placer.io/rack"}, Kueue: k}})
	if out.Err != "" || out.Rounds != 1 {
		t.Fatalf("placer: %q in %d rounds", out.Err, out.Rounds)
	}
	b := boundTo(out)
	a := 0
	for name := range b {
		if strings.HasPrefix(name, "a-") {
			a++
		}
	}
	if a != 5 || b["b-0"] == "" || b["b-1"] == "" {
		t.Fatalf("bound %v: want 5 of team-a's and both of team-b's", b)
	}
	why := failedWhy(out)
	if len(why) != 1 {
		t.Fatalf("failed %v", why)
	}
	for name, w := range why {
		if want := "QuotaExceeded: queue 'cohort/ml' holds 8000 of its 8000 milli-GPU limit; this job needs 1000"; !strings.Contains(w, want) {
			t.Errorf("%s: %q, want %q", name, w, want)
		}
	}
}
