package translate

// Kueue's queues as Placer's queue tree (ScheduleRequest.queues): a pod's
// kueue.x-k8s.io/queue-name names a LocalQueue of its namespace, whose
// ClusterQueue is the pod's Placer queue; a ClusterQueue's nominal quotas
// of nvidia.com/gpu and cpu, summed over its flavors, are its guarantee,
// and what it may hold at most (its nominal quota, plus what it may borrow
// in its cohort) its limit; a cohort is a root queue whose limit is its
// members' nominal quotas together. Kueue's meaning of the fields is its
// CRDs' (config/components/crd/bases of sigs.k8s.io/kueue):
// - borrowingLimit: at most this much of the cohort's unused quota
//   borrowed, per flavor and resource; null: no limit; none without a cohort;
// - lendingLimit: at most this much of its unused quota lent; null: all
//   of its nominal quota.
// So, per flavor and resource, a ClusterQueue in a cohort holds at most its
// nominal quota plus the smaller of its borrowingLimit and what the
// cohort's other ClusterQueues lend; one without a cohort, its nominal quota.

import (
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"placer.local/kubernetes/internal/wire/gen/placer/wire"
)

// CohortPrefix: the Placer queue of a cohort is "cohort/<name>" (a
// ClusterQueue's name has no '/').
const CohortPrefix = "cohort/"

// maxQuota: a quota above this (2^40 milli-units, a billion GPUs or
// cores) counts as this, so that no sum of them overflows.
const maxQuota = int64(1) << 40

// Quota: one flavor's quota of one resource in a ClusterQueue.
type Quota struct {
	Flavor    string
	Resource  corev1.ResourceName
	Nominal   int64  // milli-units
	Borrowing *int64 // milli-units; nil: no limit
	Lending   *int64 // milli-units; nil: all of Nominal
}

// lent: what of it the cohort's other ClusterQueues may borrow.
func (q Quota) lent() int64 {
	if q.Lending != nil {
		return min(q.Nominal, *q.Lending)
	}
	return q.Nominal
}

// ClusterQueue: what the round reads of a Kueue ClusterQueue.
type ClusterQueue struct {
	Name, Cohort string
	Quotas       []Quota // of nvidia.com/gpu and cpu (Placer's queues count no other)
}

// Kueue: the LocalQueues and ClusterQueues of the cluster (Options.Kueue).
type Kueue struct {
	LocalQueues   map[string]string // "<namespace>/<name>" -> its ClusterQueue
	ClusterQueues map[string]*ClusterQueue
	// Jobs: the queue-name label of batch Jobs ("<namespace>/<name>"):
	// Kueue's Job integration labels the Job, not its pods.
	Jobs map[string]string
	tree []*wire.QueueT
}

// NewKueue: the queues, and their Placer tree.
func NewKueue(localQueues, jobs map[string]string, cqs []*ClusterQueue) *Kueue {
	k := &Kueue{LocalQueues: localQueues, Jobs: jobs, ClusterQueues: map[string]*ClusterQueue{}}
	for _, cq := range cqs {
		k.ClusterQueues[cq.Name] = cq
	}
	k.tree = k.build()
	return k
}

// QueueOf: pod p's Placer queue, the ClusterQueue of the LocalQueue its
// queue-name label names, or else its batch Job's ("": none, or its
// LocalQueue or that ClusterQueue is unknown; the pod is then in no
// queue, without limits).
func (k *Kueue) QueueOf(p *corev1.Pod) string {
	lq := p.Labels[QueueLabel]
	if ref := metav1.GetControllerOf(p); lq == "" && ref != nil && ref.Kind == "Job" && ref.APIVersion == "batch/v1" {
		lq = k.Jobs[p.Namespace+"/"+ref.Name]
	}
	if lq == "" {
		return ""
	}
	cq := k.LocalQueues[p.Namespace+"/"+lq]
	if _, ok := k.ClusterQueues[cq]; !ok {
		return ""
	}
	return cq
}

// Tree: the queues of a round (a copy: the round lowers them by the use it
// cannot send as running jobs).
func (k *Kueue) Tree() []*wire.QueueT {
	out := make([]*wire.QueueT, len(k.tree))
	for i, q := range k.tree {
		c := *q
		out[i] = &c
	}
	return out
}

// key: a flavor's resource.
type key struct {
	flavor string
	res    corev1.ResourceName
}

func (k *Kueue) build() []*wire.QueueT {
	names := make([]string, 0, len(k.ClusterQueues))
	members := map[string][]*ClusterQueue{}
	for n, cq := range k.ClusterQueues {
		names = append(names, n)
		if cq.Cohort != "" {
			members[cq.Cohort] = append(members[cq.Cohort], cq)
		}
	}
	sort.Strings(names)
	var out []*wire.QueueT
	// lend: what the cohort's members lend, per flavor's resource.
	lend := map[string]map[key]int64{}
	for cohort, ms := range members {
		lend[cohort] = map[key]int64{}
		root := &wire.QueueT{Name: CohortPrefix + cohort, GpuMilliLimit: -1, CpuMilliLimit: -1, Weight: 1}
		for _, cq := range ms {
			for _, q := range cq.Quotas {
				lend[cohort][key{q.Flavor, q.Resource}] += q.lent()
				addLimit(root, q.Resource, q.Nominal)
			}
		}
		root.GpuMilliGuarantee, root.CpuMilliGuarantee = max(0, root.GpuMilliLimit), max(0, root.CpuMilliLimit)
		out = append(out, root)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, n := range names {
		cq := k.ClusterQueues[n]
		q := &wire.QueueT{Name: n, GpuMilliLimit: -1, CpuMilliLimit: -1, Weight: 1}
		if cq.Cohort != "" {
			q.Parent = CohortPrefix + cq.Cohort
		}
		for _, r := range cq.Quotas {
			limit := r.Nominal
			if cq.Cohort != "" {
				borrow := lend[cq.Cohort][key{r.Flavor, r.Resource}] - r.lent() // what the others lend
				if r.Borrowing != nil {
					borrow = min(borrow, *r.Borrowing)
				}
				limit += borrow
			}
			addLimit(q, r.Resource, limit)
			switch r.Resource {
			case GPUResource:
				q.GpuMilliGuarantee += r.Nominal
			case corev1.ResourceCPU:
				q.CpuMilliGuarantee += r.Nominal
			}
		}
		out = append(out, q)
	}
	return out
}

// addLimit adds v to q's limit of resource r (from -1, none, to v).
func addLimit(q *wire.QueueT, r corev1.ResourceName, v int64) {
	l := &q.CpuMilliLimit
	if r == GPUResource {
		l = &q.GpuMilliLimit
	}
	*l = max(0, *l) + v
}

// ParseLocalQueue: a LocalQueue's key ("<namespace>/<name>") and its ClusterQueue.
func ParseLocalQueue(u *unstructured.Unstructured) (string, string) {
	cq, _, _ := unstructured.NestedString(u.Object, "spec", "clusterQueue")
	return u.GetNamespace() + "/" + u.GetName(), cq
}

// ParseClusterQueue: a ClusterQueue (kueue.x-k8s.io v1beta2, or v1beta1:
// its cohort is spec.cohortName, or spec.cohort), its quotas of
// nvidia.com/gpu and cpu; an error names what is not Kueue's form.
func ParseClusterQueue(u *unstructured.Unstructured) (*ClusterQueue, error) {
	cq := &ClusterQueue{Name: u.GetName()}
	cq.Cohort, _, _ = unstructured.NestedString(u.Object, "spec", "cohortName")
	if cq.Cohort == "" {
		cq.Cohort, _, _ = unstructured.NestedString(u.Object, "spec", "cohort")
	}
	groups, _, err := unstructured.NestedSlice(u.Object, "spec", "resourceGroups")
	if err != nil {
		return nil, fmt.Errorf("ClusterQueue %s: spec.resourceGroups: %v", cq.Name, err)
	}
	for gi, g := range groups {
		gm, _ := g.(map[string]any)
		flavors, _, err := unstructured.NestedSlice(gm, "flavors")
		if err != nil {
			return nil, fmt.Errorf("ClusterQueue %s: resourceGroups[%d].flavors: %v", cq.Name, gi, err)
		}
		for _, f := range flavors {
			fm, _ := f.(map[string]any)
			flavor, _, _ := unstructured.NestedString(fm, "name")
			res, _, err := unstructured.NestedSlice(fm, "resources")
			if err != nil {
				return nil, fmt.Errorf("ClusterQueue %s: flavor %s's resources: %v", cq.Name, flavor, err)
			}
			for _, r := range res {
				rm, _ := r.(map[string]any)
				name, _, _ := unstructured.NestedString(rm, "name")
				if rn := corev1.ResourceName(name); rn != GPUResource && rn != corev1.ResourceCPU {
					continue
				}
				q := Quota{Flavor: flavor, Resource: corev1.ResourceName(name)}
				var bad error
				quantity := func(field string) *int64 {
					v, ok := rm[field]
					if !ok || v == nil || bad != nil {
						return nil
					}
					s := fmt.Sprint(v) // a string, or a JSON number (int64 or float64)
					if f, ok := v.(float64); ok {
						s = strconv.FormatFloat(f, 'f', -1, 64)
					}
					qt, err := resource.ParseQuantity(s)
					if err != nil || qt.Sign() < 0 {
						bad = fmt.Errorf("ClusterQueue %s: flavor %s, %s's %s %q: want a non-negative quantity", cq.Name, flavor, name, field, s)
						return nil
					}
					m := maxQuota
					if qt.Cmp(*resource.NewMilliQuantity(maxQuota, resource.DecimalSI)) < 0 {
						m = qt.MilliValue()
					}
					return &m
				}
				n := quantity("nominalQuota")
				q.Borrowing, q.Lending = quantity("borrowingLimit"), quantity("lendingLimit")
				if bad != nil {
					return nil, bad
				}
				if n == nil {
					return nil, fmt.Errorf("ClusterQueue %s: flavor %s, %s has no nominalQuota", cq.Name, flavor, name)
				}
				q.Nominal = *n
				cq.Quotas = append(cq.Quotas, q)
			}
		}
	}
	return cq, nil
}
