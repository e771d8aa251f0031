package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"placer.local/kubernetes/internal/plan"
	"placer.local/kubernetes/internal/translate"
)

func testScheduler(t *testing.T) (*scheduler, *fake.Clientset) {
	cs := fake.NewSimpleClientset()
	s := newScheduler(config{schedulerName: "placer", bindWorkers: 4}, cs, nil, nil)
	return s, cs
}

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
	s.queue.Failed(p.UID, time.Now())
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
