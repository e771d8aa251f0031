package main

// --dra: the mix of the KubernetesLive.DRA* tests, for clusters whose GPUs
// are devices of ResourceSlices in NVIDIA's model (scripts/k8s-cluster.sh
// nodes --dra; the slices published here, internal/dratest, every 8th
// node's last two GPUs in MIG mode), the resourceclaim controller running
// to make the claims of templates. Each allocation is then checked on the
// slices' attributes, whichever scheduler made it.

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"placer.local/kubernetes/internal/dratest"
)

// draTemplates: the mix's claim templates, by name.
var draTemplates = map[string]dratest.Want{
	"four-h100": dratest.WantH100x4, "cc9": dratest.WantCC9, "one-a100": dratest.WantA100, "mig-small": dratest.WantMIG,
	"mig-3g": dratest.WantMIG3g, "eight-h100": dratest.WantH100x8, "nine": dratest.WantNine,
}

// draMix publishes the slices and creates the templates and shared claims
// (not timed), and returns the pods, `repeat` times over: a gang of four
// pods of 8 H100 each (the coscheduling label, min-member 4); pods of 4
// H100 x16, 2 GPUs of compute capability 9 x8, 1 A100 x8, a 1g.10gb MIG
// device x20, a 3g.40gb x4; one pod of 9 GPUs (no node can meet it); and
// four pods sharing one claim of 2 GPUs of capability 9.
func draMix(ctx context.Context, cs kubernetes.Interface, ns, sched string, repeat int) []*corev1.Pod {
	if err := dratest.PublishNodes(ctx, cs, 8, 8); err != nil {
		fail("publishing the slices: %v", err)
	}
	for name, w := range draTemplates {
		t := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: w.Spec()}}
		if _, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			fail("template %s: %v", name, err)
		}
	}
	mk := func(name string, claim string, shared bool) *corev1.Pod {
		pc := corev1.PodResourceClaim{Name: "gpu"}
		if shared {
			pc.ResourceClaimName = &claim
		} else {
			pc.ResourceClaimTemplateName = &claim
		}
		p := podOf(name, ns, sched, 8000, 32<<10, 0)
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{pc}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		return p
	}
	var pods []*corev1.Pod
	for k := 0; k < repeat; k++ {
		for i := 0; i < 4; i++ {
			p := mk(fmt.Sprintf("gang-%d-%d", k, i), "eight-h100", false)
			p.Labels["scheduling.x-k8s.io/pod-group"] = fmt.Sprintf("gang-%d", k)
			p.Annotations = map[string]string{"scheduling.x-k8s.io/min-member": "4"}
			pods = append(pods, p)
		}
		for _, x := range []struct {
			tmpl string
			n    int
		}{{"four-h100", 16}, {"cc9", 8}, {"one-a100", 8}, {"mig-small", 20}, {"mig-3g", 4}, {"nine", 1}} {
			for i := 0; i < x.n; i++ {
				pods = append(pods, mk(fmt.Sprintf("%s-%d-%d", x.tmpl, k, i), x.tmpl, false))
			}
		}
		shared := fmt.Sprintf("shared-%d", k)
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: shared, Namespace: ns}, Spec: dratest.WantCC9.Spec()}
		if _, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			fail("claim %s: %v", shared, err)
		}
		for i := 0; i < 4; i++ {
			pods = append(pods, mk(fmt.Sprintf("share-%d-%d", k, i), shared, true))
		}
	}
	return pods
}

// draResult: what the claims of a --dra run came to.
type draResult struct {
	ClaimsAllocated int `json:"claims_allocated"`
	MIGPlaced       int `json:"mig_devices_placed"`
	// Unmeetable: pods of the 9-GPU claim left pending (as they must be).
	Unmeetable int `json:"unmeetable_pending"`
	// Invalid: a device given twice, a device not on its pod's node or not
	// what its request asked, a count short, a bound pod whose claim is not
	// allocated or reserved for it, a pod of the 9-GPU claim bound.
	Invalid  int      `json:"invalid_allocations"`
	Problems []string `json:"problems,omitempty"`
}

// draMeasure: the whole GPUs allocated (res.GPUsPlaced, res.GPUsFree,
// the nodes partly used) and the checks of draResult.
func draMeasure(ctx context.Context, cs kubernetes.Interface, ns string, res *result) {
	d := &draResult{}
	bad := func(f string, a ...any) {
		d.Invalid++
		if len(d.Problems) < 20 {
			d.Problems = append(d.Problems, fmt.Sprintf(f, a...))
		}
	}
	sl, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("%v", err)
	}
	type dev struct {
		node  string
		attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	}
	devs := map[string]dev{}
	wholeOn := map[string]int64{}
	for _, s := range sl.Items {
		for _, x := range s.Spec.Devices {
			devs[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+x.Name] = dev{*s.Spec.NodeName, x.Attributes}
			if dratest.AttrString(x.Attributes, "type") == "gpu" {
				wholeOn[*s.Spec.NodeName]++
			}
		}
	}
	cl, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("%v", err)
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	owner := map[string]string{}
	usedOn := map[string]int64{}
	for i := range cl.Items {
		c := &cl.Items[i]
		claims[c.Name] = c
		if c.Status.Allocation == nil {
			continue
		}
		d.ClaimsAllocated++
		for _, r := range c.Status.Allocation.Devices.Results {
			id := r.Driver + "/" + r.Pool + "/" + r.Device
			if o, dup := owner[id]; dup {
				bad("device %s allocated to claims %s and %s", id, o, c.Name)
			}
			owner[id] = c.Name
			x, ok := devs[id]
			switch {
			case !ok:
				bad("claim %s: device %s in no slice", c.Name, id)
			case dratest.AttrString(x.attrs, "type") == "mig":
				d.MIGPlaced++
			default:
				res.GPUsPlaced++
				usedOn[x.node]++
			}
		}
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("%v", err)
	}
	for _, p := range pods.Items {
		pc := p.Spec.ResourceClaims[0]
		src, name := "", ""
		switch {
		case pc.ResourceClaimName != nil:
			src, name = "cc9", *pc.ResourceClaimName
		default:
			src = *pc.ResourceClaimTemplateName
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
		}
		if src == "nine" {
			if p.Spec.NodeName != "" {
				bad("pod %s of the 9-GPU claim bound to %s", p.Name, p.Spec.NodeName)
			} else {
				d.Unmeetable++
			}
			continue
		}
		if p.Spec.NodeName == "" {
			continue
		}
		w, c := draTemplates[src], claims[name]
		switch {
		case c == nil || c.Status.Allocation == nil:
			bad("pod %s bound to %s: its claim %q not allocated", p.Name, p.Spec.NodeName, name)
			continue
		case !slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID }):
			bad("pod %s: claim %s not reserved for it", p.Name, name)
		}
		if n := int64(len(c.Status.Allocation.Devices.Results)); n != w.Count {
			bad("pod %s: %d devices allocated, %d asked", p.Name, n, w.Count)
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			x, ok := devs[r.Driver+"/"+r.Pool+"/"+r.Device]
			switch {
			case !ok:
			case x.node != p.Spec.NodeName:
				bad("pod %s on %s: device %s is on %s", p.Name, p.Spec.NodeName, r.Device, x.node)
			case !w.OK(x.attrs):
				bad("pod %s: device %s on %s is not %s", p.Name, r.Device, x.node, w.Describe)
			}
		}
	}
	res.PartlyUsedNodes, res.FreeOnPartly, res.GPUsFree = 0, 0, 0
	for node, n := range wholeOn {
		u := usedOn[node]
		if u > 0 && u < n {
			res.PartlyUsedNodes++
			res.FreeOnPartly += n - u
		}
		res.GPUsFree += n - u
	}
	res.DRA = d
}
