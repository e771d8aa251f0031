package e2e

// The examples docs/kubernetes.md gives for the three ways pods ask for
// GPUs, applied to a live apiserver as `kubectl apply -f` would (as admin,
// strict field validation), and scheduled.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// docsExample: the objects of the ```yaml block of docs/kubernetes.md whose
// first line is "# example: <name>".
func docsExample(t *testing.T, name string) []manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if strings.HasPrefix(body, "# example: "+name) {
			return yamlObjects(t, "docs/kubernetes.md, "+name, []byte(body))
		}
	}
	t.Fatalf("docs/kubernetes.md has no yaml block starting \"# example: %s\"", name)
	return nil
}

// objectClient: the dynamic client of objects' resources, as admin.
type objectClient struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func (c *cluster) objectClient() objectClient {
	c.t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(c.dir, "admin.kubeconfig"))
	if err != nil {
		c.t.Fatal(err)
	}
	return objectClient{dynamic.NewForConfigOrDie(rc), restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.cs.Discovery()))}
}

// resource: the client of u's resource, in u's namespace (else ns, as
// kubectl's -n) where the resource is namespaced; a NoMatch error where
// the apiserver does not serve u's kind.
func (o objectClient) resource(u *unstructured.Unstructured, ns string) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	mapping, err := o.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return o.dyn.Resource(mapping.Resource), nil
	}
	if u.GetNamespace() != "" {
		ns = u.GetNamespace()
	}
	return o.dyn.Resource(mapping.Resource).Namespace(ns), nil
}

// applyObjects creates the objects, the namespaced ones in ns, as admin.
func (c *cluster) applyObjects(ns string, objs []manifest) {
	c.t.Helper()
	oc := c.objectClient()
	c.create(ns)
	for _, m := range objs {
		r, err := oc.resource(m.obj, ns)
		if err != nil {
			c.t.Fatalf("%s: %v", m, err)
		}
		if _, err := r.Create(context.Background(), m.obj, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			c.t.Fatalf("applying %s: %v", m, err)
		}
	}
}

// The extended-resources pod is bound; the pod as Kueue leaves it before
// admission is not (no Binding tried, no condition of ours) until Kueue's
// admission is played: its gate removed and its ResourceFlavor's node
// selector added; then it is bound there.
func TestDocsExamplesApply(t *testing.T) {
	c := newCluster(t, 8, 0)
	ns := "docs"
	c.applyObjects(ns, docsExample(t, "extended resources"))
	c.applyObjects(ns, docsExample(t, "under Kueue"))
	url := c.startSchedulerMetrics()
	c.waitBound(ns, 60*time.Second, "batch")
	if p := c.get(ns, "infer"); p.Spec.Containers[0].Resources.Requests.Name("nvidia.com/gpu", "").Value() != 2 {
		t.Fatalf("the example's pod asks for %v", p.Spec.Containers[0].Resources.Requests)
	}
	// Cycles go on (a pod of ours keeps one running each --retry-interval
	// while it waits): the gated pod stays out of them.
	c.createPods(ns, podSpec{name: "unfit", gpus: 16})
	c0 := metric(scrape(url), "placer_k8s_scheduling_cycles_total")
	waitFor(t, 30*time.Second, "two more cycles", func() (bool, string) {
		n := metric(scrape(url), "placer_k8s_scheduling_cycles_total")
		return n >= c0+2, ""
	})
	b := c.get(ns, "batch")
	if b.Spec.NodeName != "" {
		t.Fatalf("the gated pod was bound to %s", b.Spec.NodeName)
	}
	if cd := condition(b); cd != nil && cd.Reason != "SchedulingGated" {
		t.Errorf("the scheduler wrote a condition on the gated pod: %+v", cd)
	}
	if e := metric(scrape(url), "placer_k8s_bind_errors_total"); e != 0 {
		t.Fatalf("%v Binding requests refused: the scheduler tried to bind the gated pod", e)
	}
	// Kueue admits it: the flavor's node selector, then the gate gone.
	b.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-2"}
	b.Spec.SchedulingGates = nil
	if _, err := c.cs.CoreV1().Pods(ns).Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("admitting the pod as Kueue would: %v", err)
	}
	c.waitBound(ns, 60*time.Second, "unfit")
	node := c.get(ns, "batch").Spec.NodeName
	if zone := nodeLabels(c)[node]["topology.kubernetes.io/zone"]; zone != "zone-2" {
		t.Errorf("the admitted pod is on %s, in %q, not in its flavor's zone-2", node, zone)
	}
	c.checkCapacity()
}

// The DRA example's template and pod: the pod bound, its claim allocated
// four H100s of its node, reserved for it.
func TestDocsDRAExampleApplies(t *testing.T) {
	c := newDRACluster(t, 16)
	ns := "docs-dra"
	c.applyObjects(ns, docsExample(t, "DRA claims"))
	c.startScheduler()
	p := c.waitBound(ns, 60*time.Second)[0]
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s's claims: %+v", p.Name, p.Status.ResourceClaimStatuses)
	}
	claim, err := c.cs.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 4 {
		t.Fatalf("claim %s: allocation %+v, want 4 devices", claim.Name, claim.Status.Allocation)
	}
	reserved := false
	for _, r := range claim.Status.ReservedFor {
		reserved = reserved || r.UID == p.UID
	}
	if !reserved {
		t.Errorf("claim %s reserved for %+v, not for pod %s", claim.Name, claim.Status.ReservedFor, p.Name)
	}
	c.checkClaims(ns, map[string]want{"four-h100": wantH100x4})
}
