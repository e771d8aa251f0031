// Package dra is dynamic resource allocation (resource.k8s.io/v1) as the
// Placer scheduler sees it: the devices of the ResourceSlices, the claims
// of a pod, and their allocation, done by Kubernetes' own allocator
// (k8s.io/dynamic-resource-allocation/structured, which evaluates the
// DeviceClasses' and requests' CEL selectors), never by a matcher of ours.
//
// Each cycle takes a Snapshot of the slices, classes and claims (claims
// this scheduler wrote and the informer has not shown yet included). A
// View of it per Placer round adds the allocations the cycle's earlier
// rounds made. In a round:
//   - the devices of the GPU driver (gpu.nvidia.com) are GPUs of their
//     node: a whole GPU each; a MIG device a share of its GPU (compute
//     slices of 7, e.g. 1g.10gb 142 milli-GPU), a GPU in MIG mode never
//     given whole (999 milli-GPU at most); a device allocated to any claim
//     is not free;
//   - a pod's claims become its job's demand (the GPUs its allocation on a
//     node that can hold it takes: whole GPUs, or one MIG share) and its
//     node requirements (the nodes where the allocator cannot allocate
//     them all, or where an allocated claim is not available, excluded, in
//     kube-scheduler's words; counting the free devices that meet a
//     request answers for the allocator where it can: count);
//   - once Placer has placed the pod, Take allocates its claims on that
//     node, on the GPUs Placer chose where the allocator can, else
//     anywhere on the node.
//
// The scheduler then writes each claim's status.allocation and
// reservedFor (cmd/placer-k8s-scheduler, claims.go) before the Binding.
package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// kube-scheduler's words (its DynamicResources plugin).
const (
	CannotAllocate = "cannot allocate all claims"
	NotAvailable   = "resourceclaim not available on the node"
	TimedOut       = "timed out trying to allocate devices"
)

var errTimedOut = errors.New(TimedOut)

// Features: the allocator's, as kube-scheduler v1.37 enables them by
// default, less those that need state this scheduler does not keep
// (consumable capacity, binding conditions).
var Features = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}

// NewCache: the compiled CEL expressions, kept across cycles.
func NewCache() *cel.Cache { return cel.NewCache(64, cel.Features{}) }

// Classes lists DeviceClasses (an informer's lister fits).
type Classes = structured.DeviceClassLister

// Input of a Snapshot.
type Input struct {
	Slices    []*resourceapi.ResourceSlice
	Classes   Classes
	Claims    []*resourceapi.ResourceClaim
	GPUDriver string // the driver whose devices are GPUs (gpu.nvidia.com)
	Cache     *cel.Cache
	Matches   *Matches // (nil: a new one)
}

// Snapshot: one cycle's devices and claims.
type Snapshot struct {
	in        Input
	byNode    map[string][]*resourceapi.ResourceSlice
	global    []*resourceapi.ResourceSlice // slices for all nodes, or by node selector
	claims    map[string]*resourceapi.ResourceClaim
	allocated sets.Set[structured.DeviceID]
	gpus      map[string]*nodeGPUs
	mu        sync.Mutex
}

// NewSnapshot: the cycle's view of the slices, classes and claims.
func NewSnapshot(in Input) *Snapshot {
	if in.Cache == nil {
		in.Cache = NewCache()
	}
	if in.Matches == nil {
		in.Matches = NewMatches()
	}
	s := &Snapshot{in: in, byNode: map[string][]*resourceapi.ResourceSlice{}, claims: map[string]*resourceapi.ResourceClaim{},
		allocated: sets.New[structured.DeviceID](), gpus: map[string]*nodeGPUs{}}
	for _, sl := range in.Slices {
		if n := ptr.Deref(sl.Spec.NodeName, ""); n != "" {
			s.byNode[n] = append(s.byNode[n], sl)
		} else {
			s.global = append(s.global, sl)
		}
	}
	for _, c := range in.Claims {
		s.claims[c.Namespace+"/"+c.Name] = c
		addAllocated(s.allocated, c.Status.Allocation)
	}
	return s
}

// addAllocated: the devices of an allocation, as in use (admin access
// does not take a device, as in kube-scheduler).
func addAllocated(set sets.Set[structured.DeviceID], a *resourceapi.AllocationResult) {
	if a == nil {
		return
	}
	for _, r := range a.Devices.Results {
		if !ptr.Deref(r.AdminAccess, false) {
			set.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
}

// ---------------------------------------------------------------- GPUs

// gpu: one GPU of a node, from its devices.
type gpu struct {
	key   string              // its uuid (or the device's name)
	bus   string              // its PCIe bus, then
	order int64               // its index, for the order of a node's GPUs
	whole structured.DeviceID // the device of the GPU whole ("" = none: a GPU in MIG mode)
	migs  map[structured.DeviceID]uint16
}

type nodeGPUs struct {
	gpus     []*gpu
	byDevice map[structured.DeviceID]int // a GPU device or MIG device -> its GPU
	shares   map[structured.DeviceID]uint16
	product  string
}

// attr: a device attribute by its name, qualified by the driver or not.
func attr(d *resourceapi.Device, driver, name string) *resourceapi.DeviceAttribute {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok {
		return &a
	}
	if a, ok := d.Attributes[resourceapi.QualifiedName(driver+"/"+name)]; ok {
		return &a
	}
	return nil
}

func attrString(d *resourceapi.Device, driver, name string) string {
	if a := attr(d, driver, name); a != nil && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

var migProfile = regexp.MustCompile(`^(\d+)g\.`)

// MIGShare: a MIG profile's share of its GPU in milli-GPU, by compute
// slices of the 7 an A100, H100 or H200 has ("1g.10gb" 142, "3g.40gb"
// 428); an unknown profile as one slice.
func MIGShare(profile string) uint16 {
	n := 1
	if m := migProfile.FindStringSubmatch(profile); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	return uint16(min(1000, max(1, n)*1000/7))
}

// node: node n's GPUs, from the GPU driver's devices in its slices.
func (s *Snapshot) node(name string) *nodeGPUs {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.gpus[name]; ok {
		return g
	}
	ng := &nodeGPUs{byDevice: map[structured.DeviceID]int{}, shares: map[structured.DeviceID]uint16{}}
	s.gpus[name] = ng
	drv := s.in.GPUDriver
	byKey := map[string]*gpu{}
	get := func(key string) *gpu {
		g := byKey[key]
		if g == nil {
			g = &gpu{key: key, order: -1, migs: map[structured.DeviceID]uint16{}}
			byKey[key] = g
		}
		return g
	}
	for _, sl := range s.byNode[name] {
		if sl.Spec.Driver != drv || sl.Spec.Pool.Name == "" {
			continue
		}
		for i := range sl.Spec.Devices {
			d := &sl.Spec.Devices[i]
			id := structured.MakeDeviceID(drv, sl.Spec.Pool.Name, d.Name)
			if p := attrString(d, drv, "productName"); p != "" && ng.product == "" {
				ng.product = p
			}
			bus := attrString(d, drv, "pcieBusID")
			switch attrString(d, drv, "type") {
			case "mig":
				parent := attrString(d, drv, "parentUUID")
				if parent == "" {
					continue
				}
				g := get(parent)
				g.migs[id] = MIGShare(attrString(d, drv, "profile"))
				ng.shares[id] = g.migs[id]
				g.bus = bus
			case "gpu", "":
				key := attrString(d, drv, "uuid")
				if key == "" {
					key = d.Name
				}
				g := get(key)
				g.whole, g.bus = id, bus
				for _, n := range []string{"index", "minor"} {
					if a := attr(d, drv, n); a != nil && a.IntValue != nil {
						g.order = *a.IntValue
						break
					}
				}
			}
		}
	}
	for _, g := range byKey {
		ng.gpus = append(ng.gpus, g)
	}
	sort.Slice(ng.gpus, func(i, j int) bool {
		a, b := ng.gpus[i], ng.gpus[j]
		if a.bus != b.bus {
			return a.bus < b.bus
		}
		if a.order != b.order {
			return a.order < b.order
		}
		return a.key < b.key
	})
	for i, g := range ng.gpus {
		if g.whole != (structured.DeviceID{}) {
			ng.byDevice[g.whole] = i
		}
		for id := range g.migs {
			ng.byDevice[id] = i
		}
	}
	return ng
}

// ---------------------------------------------------------------- claims

// PodClaims: a pod's claims, resolved.
type PodClaims struct {
	Pod    *corev1.Pod
	Claims []*resourceapi.ResourceClaim // in the pod's order (claims not created on purpose left out)
}

// Resolve: pod p's claims, or why the pod waits for them before any
// round, in kube-scheduler's words (its PreEnqueue: a claim not created
// yet, missing, being deleted, or not the pod's). nil, "": no claims.
func (s *Snapshot) Resolve(p *corev1.Pod) (*PodClaims, string) {
	if len(p.Spec.ResourceClaims) == 0 {
		return nil, ""
	}
	pc := &PodClaims{Pod: p}
	for i := range p.Spec.ResourceClaims {
		pr := &p.Spec.ResourceClaims[i]
		name, check, err := resourceclaim.Name(p, pr)
		if err != nil {
			return nil, err.Error()
		}
		if name == nil {
			continue
		}
		c := s.claims[p.Namespace+"/"+*name]
		switch {
		case c == nil:
			return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaim"), *name).Error()
		case c.DeletionTimestamp != nil:
			return nil, fmt.Sprintf("resourceclaim %q is being deleted", c.Name)
		}
		if check {
			if err := resourceclaim.IsForPod(p, c, false); err != nil {
				return nil, err.Error()
			}
		}
		pc.Claims = append(pc.Claims, c)
	}
	if len(pc.Claims) == 0 {
		return nil, ""
	}
	return pc, ""
}

// Signature: what pods with claims alike share (for the planner's
// classes): each claim's spec, or, allocated or shared, the claim itself.
func (s *Snapshot) Signature(p *corev1.Pod) string {
	pc, why := s.Resolve(p)
	if pc == nil {
		return why
	}
	return claimsKey(pc.Claims, func(c *resourceapi.ResourceClaim) bool {
		return c.Status.Allocation != nil || len(c.OwnerReferences) == 0
	})
}

// claimsKey: claims by their specs, those for which `itself` holds by
// their UIDs.
func claimsKey(claims []*resourceapi.ResourceClaim, itself func(*resourceapi.ResourceClaim) bool) string {
	var b strings.Builder
	for _, c := range claims {
		if itself(c) {
			b.WriteString("claim:" + string(c.UID) + ";")
			continue
		}
		spec, _ := json.Marshal(c.Spec)
		b.Write(spec)
		b.WriteString(";")
	}
	return b.String()
}

// ---------------------------------------------------------------- views

// ClaimAlloc: one claim of a pod placed this cycle: its allocation when
// this cycle made it (nil: allocated already, the pod is only added to
// reservedFor).
type ClaimAlloc struct {
	Claim      *resourceapi.ResourceClaim
	Allocation *resourceapi.AllocationResult
}

// PodAlloc: a pod's claims on the node it is placed on.
type PodAlloc struct {
	Pod    *corev1.Pod
	Node   string
	Claims []ClaimAlloc
}

// View: the snapshot with the allocations of the pods placed so far this
// cycle; one per Placer round.
type View struct {
	s         *Snapshot
	allocated sets.Set[structured.DeviceID]
	pending   map[types.UID]*resourceapi.AllocationResult
	mu        sync.Mutex
	fits      map[string]*fit
}

// fit: where a kind of pod's claims can be allocated, and its demand.
type fit struct {
	once       sync.Once
	why        map[string]string // node -> why not ("" = it can)
	err        string            // a problem of the claims themselves (no node can)
	gpus, mill uint16
}

// View: a round's view, with the allocations of the pods placed before it.
func (s *Snapshot) View(placed []*PodAlloc) *View {
	v := &View{s: s, allocated: s.allocated.Clone(), pending: map[types.UID]*resourceapi.AllocationResult{}, fits: map[string]*fit{}}
	for _, pa := range placed {
		v.add(pa)
	}
	return v
}

func (v *View) add(pa *PodAlloc) {
	for _, ca := range pa.Claims {
		if ca.Allocation != nil {
			addAllocated(v.allocated, ca.Allocation)
			v.pending[ca.Claim.UID] = ca.Allocation
		}
	}
}

// allocation: a claim's allocation, made before or this cycle (nil: none).
func (v *View) allocation(c *resourceapi.ResourceClaim) *resourceapi.AllocationResult {
	if c.Status.Allocation != nil {
		return c.Status.Allocation
	}
	return v.pending[c.UID]
}

// GPUs: node's GPUs from its devices, the free milli-GPU of each (whole:
// 1000; a GPU in MIG mode at most 999, less its MIG devices allocated;
// 0 when allocated whole), and its product.
func (v *View) GPUs(node string) ([]uint16, string) {
	ng := v.s.node(node)
	if len(ng.gpus) == 0 {
		return nil, ""
	}
	free := make([]uint16, len(ng.gpus))
	for i, g := range ng.gpus {
		f := 1000
		if g.whole == (structured.DeviceID{}) {
			f = 999
		}
		if g.whole != (structured.DeviceID{}) && v.allocated.Has(g.whole) {
			f = 0
		}
		for id, m := range g.migs {
			if v.allocated.Has(id) {
				f -= int(m)
			}
		}
		free[i] = uint16(max(0, f))
	}
	return free, ng.product
}

// slicesFor: the slices the allocator considers for node (its own, and
// those for all or selected nodes), those of the GPU driver limited to
// the devices of GPUs `only` when given.
func (v *View) slicesFor(node string, only []int) []*resourceapi.ResourceSlice {
	own := v.s.byNode[node]
	out := make([]*resourceapi.ResourceSlice, 0, len(own)+len(v.s.global))
	if only == nil {
		out = append(out, own...)
		return append(out, v.s.global...)
	}
	ng := v.s.node(node)
	keep := map[int]bool{}
	for _, i := range only {
		keep[i] = true
	}
	for _, sl := range own {
		if sl.Spec.Driver != v.s.in.GPUDriver {
			out = append(out, sl)
			continue
		}
		cp := *sl
		cp.Spec.Devices = nil
		for _, d := range sl.Spec.Devices {
			gi, ok := ng.byDevice[structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name)]
			if !ok || keep[gi] {
				cp.Spec.Devices = append(cp.Spec.Devices, d)
			}
		}
		out = append(out, &cp)
	}
	return append(out, v.s.global...)
}

// AllocateTimeout bounds the allocator on one node, as kube-scheduler's
// DynamicResources filterTimeout does (its default 10 s; here less, as a
// round tries every node): its search backtracks over the devices, which
// for a request that nearly fits takes factorial time.
var AllocateTimeout = 2 * time.Second

// Matches: whether devices meet selectors, evaluated once (a device is
// known by its driver, pool and name, and its slice's UID and resource
// version, so an updated slice is evaluated again); one for the scheduler's life, shared by its cycles.
type Matches struct {
	mu sync.Mutex
	m  map[string]bool
}

// NewMatches: an empty cache of device matches.
func NewMatches() *Matches { return &Matches{m: map[string]bool{}} }

// selectable: whether device d of slice sl meets a class's and a
// request's selectors, evaluated by the allocator's own CEL package and
// compiled-expression cache (known false: an error, left to the allocator
// to report).
func (s *Snapshot) selectable(sl *resourceapi.ResourceSlice, d *resourceapi.Device, sels [][]resourceapi.DeviceSelector) (match, known bool) {
	var key strings.Builder
	key.WriteString(sl.Spec.Driver + "/" + sl.Spec.Pool.Name + "/" + d.Name + "/" + string(sl.UID) + "/" + sl.ResourceVersion)
	for _, ss := range sels {
		for _, x := range ss {
			if x.CEL == nil {
				return false, false
			}
			key.WriteString("\x00" + x.CEL.Expression)
		}
	}
	k := key.String()
	mc := s.in.Matches
	mc.mu.Lock()
	m, ok := mc.m[k]
	mc.mu.Unlock()
	if ok {
		return m, true
	}
	m = true
	for _, ss := range sels {
		for _, x := range ss {
			expr := s.in.Cache.GetOrCompile(x.CEL.Expression)
			if expr.Error != nil {
				return false, false
			}
			ok, _, err := expr.DeviceMatches(context.Background(), cel.Device{Driver: sl.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
			if err != nil {
				return false, false
			}
			m = m && ok
		}
	}
	mc.mu.Lock()
	if len(mc.m) > 1<<20 { // slices replaced many times over: start again
		mc.m = map[string]bool{}
	}
	mc.m[k] = m
	mc.mu.Unlock()
	return m, true
}

// simple: a device the allocator gives whole to one claim with no more
// check than its selectors (no counters, taints, binding conditions,
// multiple allocations or node selection of its own).
func simple(sl *resourceapi.ResourceSlice, d *resourceapi.Device) bool {
	return len(sl.Spec.SharedCounters) == 0 && !ptr.Deref(sl.Spec.PerDeviceNodeSelection, false) && len(d.ConsumesCounters) == 0 &&
		len(d.Taints) == 0 && len(d.BindingConditions) == 0 && !ptr.Deref(d.AllowMultipleAllocations, false)
}

// Verdicts of count.
const (
	cannot  = -1 // too few devices: the allocator cannot succeed
	unknown = 0  // the allocator must be asked
	can     = 1  // it will succeed
)

// count: what counting the free devices that meet each request's class
// and selectors tells of claims on the node's slices. Too few for a
// request: cannot (the allocator is not run: its search backtracks over
// the devices, in factorial time when a request nearly fits). Enough for
// claims of one request of exactly N devices, no constraint nor admin
// access, on simple devices: can (the allocator takes any N of them; it
// then runs only on the node Placer chooses). Else unknown.
func (v *View) count(slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) int {
	allSimple := true
	for _, sl := range slices {
		for i := range sl.Spec.Devices {
			allSimple = allSimple && simple(sl, &sl.Spec.Devices[i])
		}
	}
	// enough: whether a request finds count devices (false, false: not known).
	enough := func(class string, sels []resourceapi.DeviceSelector, mode resourceapi.DeviceAllocationMode, count int64) (bool, bool) {
		if mode == resourceapi.DeviceAllocationModeAll {
			return false, false
		}
		cl, err := v.s.in.Classes.Get(class)
		if err != nil {
			return false, false
		}
		all := [][]resourceapi.DeviceSelector{cl.Spec.Selectors, sels}
		have := int64(0)
		for _, sl := range slices {
			for i := range sl.Spec.Devices {
				d := &sl.Spec.Devices[i]
				if v.allocated.Has(structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name)) {
					continue
				}
				m, known := v.s.selectable(sl, d, all)
				if !known {
					return false, false
				}
				if m {
					if have++; have >= max(1, count) {
						return true, true
					}
				}
			}
		}
		return false, true
	}
	requests, exact := 0, true
	for _, c := range claims {
		exact = exact && len(c.Spec.Devices.Constraints) == 0
		for _, r := range c.Spec.Devices.Requests {
			requests++
			switch {
			case r.Exactly != nil:
				if ptr.Deref(r.Exactly.AdminAccess, false) {
					exact = false
					continue
				}
				ok, known := enough(r.Exactly.DeviceClassName, r.Exactly.Selectors, r.Exactly.AllocationMode, r.Exactly.Count)
				if known && !ok {
					return cannot
				}
				exact = exact && known
			case len(r.FirstAvailable) > 0:
				exact = false
				none := true
				for _, sr := range r.FirstAvailable {
					ok, known := enough(sr.DeviceClassName, sr.Selectors, sr.AllocationMode, sr.Count)
					none = none && known && !ok
				}
				if none {
					return cannot
				}
			}
		}
	}
	if exact && requests == 1 && allSimple {
		return can
	}
	return unknown
}

// allocate: the allocator's result for claims on node n (nil, nil when it
// cannot; errTimedOut when it took AllocateTimeout; another error for a
// problem of the claims or classes themselves).
func (v *View) allocate(n *corev1.Node, claims []*resourceapi.ResourceClaim, only []int) ([]resourceapi.AllocationResult, error) {
	slices := v.slicesFor(n.Name, only)
	if v.count(slices, claims) == cannot {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), AllocateTimeout)
	defer cancel()
	a, err := structured.NewAllocator(ctx, Features, structured.AllocatedState{AllocatedDevices: v.allocated},
		v.s.in.Classes, slices, v.s.in.Cache)
	if err != nil {
		return nil, err
	}
	res, err := a.Allocate(ctx, n, claims)
	if errors.Is(err, structured.ErrFailedAllocationOnNode) {
		return nil, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, errTimedOut
	}
	if err != nil {
		return nil, err
	}
	if len(res) != len(claims) {
		return nil, nil
	}
	return res, nil
}

// split: pc's claims to allocate, and those allocated (before or this cycle).
func (v *View) split(pc *PodClaims) (todo, done []*resourceapi.ResourceClaim) {
	for _, c := range pc.Claims {
		if v.allocation(c) != nil {
			done = append(done, c)
		} else {
			todo = append(todo, c)
		}
	}
	return todo, done
}

// Check: why pod pc cannot be placed at all (a device class missing, an
// allocator error), as kube-scheduler's PreFilter says it ("" = it can
// be tried).
func (v *View) Check(pc *PodClaims) string {
	todo, _ := v.split(pc)
	for _, c := range todo {
		for _, r := range c.Spec.Devices.Requests {
			var classes []string
			switch {
			case r.Exactly != nil:
				classes = []string{r.Exactly.DeviceClassName}
			default:
				for _, sr := range r.FirstAvailable {
					classes = append(classes, sr.DeviceClassName)
				}
			}
			for _, cl := range classes {
				if _, err := v.s.in.Classes.Get(cl); err != nil {
					return fmt.Sprintf("request %s: device class %s does not exist", r.Name, cl)
				}
			}
		}
	}
	return ""
}

// key: what the fit of pc's claims depends on.
func (v *View) key(pc *PodClaims) string {
	return claimsKey(pc.Claims, func(c *resourceapi.ResourceClaim) bool { return v.allocation(c) != nil })
}

// Fit: for each of `nodes`, why pc's claims cannot be allocated there ("" =
// they can), in kube-scheduler's words, and the demand they make of
// Placer: whole GPUs, or one MIG share (gpus 1, milli < 1000). An error:
// the claims cannot be allocated anywhere (the allocator's error).
func (v *View) Fit(pc *PodClaims, nodes []*corev1.Node) (map[string]string, uint16, uint16, string) {
	k := v.key(pc)
	v.mu.Lock()
	f := v.fits[k]
	if f == nil {
		f = &fit{}
		v.fits[k] = f
	}
	v.mu.Unlock()
	f.once.Do(func() { v.fit(f, pc, nodes) })
	return f.why, f.gpus, f.mill, f.err
}

func (v *View) fit(f *fit, pc *PodClaims, nodes []*corev1.Node) {
	todo, done := v.split(pc)
	f.why = make(map[string]string, len(nodes))
	f.mill = 1000
	results := make([][]resourceapi.AllocationResult, len(nodes))
	errs := make([]error, len(nodes))
	whys := make([]string, len(nodes))
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				n := nodes[i]
				for _, c := range done {
					if !available(v.allocation(c), n) {
						whys[i] = NotAvailable
						break
					}
				}
				if whys[i] != "" || len(todo) == 0 {
					continue
				}
				if v.count(v.slicesFor(n.Name, nil), todo) == can {
					continue // (the allocator runs where Placer places it: Take)
				}
				res, err := v.allocate(n, todo, nil)
				switch {
				case err == errTimedOut:
					whys[i] = TimedOut
				case err != nil:
					errs[i] = err
					whys[i] = CannotAllocate
				case res == nil:
					whys[i] = CannotAllocate
				default:
					results[i] = res
				}
			}
		}()
	}
	for i := range nodes {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, n := range nodes {
		f.why[n.Name] = whys[i]
		if errs[i] != nil && f.err == "" {
			f.err = errs[i].Error()
		}
	}
	// The demand: one allocation's, on the first node where one is made.
	for i, n := range nodes {
		res := results[i]
		if res == nil && whys[i] == "" && len(todo) > 0 {
			var err error
			if res, err = v.allocate(n, todo, nil); err != nil || res == nil {
				f.why[n.Name] = CannotAllocate // (counted enough, yet not allocated: not expected)
				continue
			}
		}
		if res != nil {
			f.gpus, f.mill = v.demand(n.Name, res)
			break
		}
	}
}

// available: whether an allocation's node selector admits node n.
func available(a *resourceapi.AllocationResult, n *corev1.Node) bool {
	if a == nil || a.NodeSelector == nil {
		return true
	}
	ok, err := structured.NodeMatches(Features, n, "", false, a.NodeSelector)
	return err == nil && ok
}

// demand: what an allocation on node takes of its GPUs, as one Placer
// demand: whole GPUs; or one MIG share (gpus 1, milli its share); MIG
// devices beside whole GPUs, or several, are left to the allocator
// (only the whole GPUs counted).
func (v *View) demand(node string, res []resourceapi.AllocationResult) (uint16, uint16) {
	ng := v.s.node(node)
	whole, migs := 0, []uint16{}
	for _, a := range res {
		for _, r := range a.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if m, ok := ng.shares[id]; ok {
				migs = append(migs, m)
			} else if _, ok := ng.byDevice[id]; ok {
				whole++
			}
		}
	}
	if whole == 0 && len(migs) == 1 {
		return 1, migs[0]
	}
	return uint16(whole), 1000
}

// Take allocates pc's claims on node n, on the GPUs Placer chose (`gpus`,
// the node's DRA GPU indices) where the allocator can, else anywhere on
// the node; later rounds and Takes see the devices in use. "" and the
// allocation, or why not (kube-scheduler's words; nothing is taken then).
func (v *View) Take(pc *PodClaims, n *corev1.Node, gpus []int) (*PodAlloc, string) {
	todo, done := v.split(pc)
	pa := &PodAlloc{Pod: pc.Pod, Node: n.Name}
	for _, c := range done {
		if !available(v.allocation(c), n) {
			return nil, NotAvailable
		}
	}
	var res []resourceapi.AllocationResult
	if len(todo) > 0 {
		var err error
		if len(gpus) > 0 {
			res, err = v.allocate(n, todo, gpus)
		}
		if res == nil && err == nil {
			res, err = v.allocate(n, todo, nil)
		}
		if err != nil || res == nil {
			return nil, CannotAllocate
		}
	}
	ti := 0
	for _, c := range pc.Claims {
		if v.allocation(c) != nil {
			pa.Claims = append(pa.Claims, ClaimAlloc{Claim: c})
			continue
		}
		a := res[ti]
		ti++
		pa.Claims = append(pa.Claims, ClaimAlloc{Claim: c, Allocation: &a})
	}
	v.mu.Lock()
	v.add(pa)
	v.fits = map[string]*fit{} // what fits where has changed
	v.mu.Unlock()
	return pa, ""
}
