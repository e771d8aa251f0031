// Package dratest is a test driver for dynamic resource allocation: it
// publishes ResourceSlices in the model of NVIDIA's DRA driver
// (k8s-dra-driver-gpu, driver gpu.nvidia.com), one pool per node named
// after it, a device per GPU ("gpu-<minor>", type gpu) or, for a GPU in
// MIG mode, a device per MIG instance ("gpu-<minor>-mig-<profile id>-<start>-<size>",
// type mig, its parentUUID, profile and memory slices) and NVIDIA's two
// DeviceClasses, gpu.nvidia.com and mig.nvidia.com. The live tests and
// placer-k8s-bench --dra publish these for the nodes of the local control
// plane, which has no kubelet and so no driver of its own.
package dratest

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Driver: NVIDIA's driver name.
const Driver = "gpu.nvidia.com"

// Product: a GPU product as NVIDIA's driver describes it.
type Product struct {
	Label        string // the node label nvidia.com/gpu.product (GPU feature discovery's)
	Name         string // the device attribute productName
	Architecture string
	Capability   string // cudaComputeCapability
	MemoryGi     int64
}

// Products: the two of the live tests (A100 and H100, 80 GB each).
var Products = map[string]Product{
	"NVIDIA-A100-SXM4-80GB": {Label: "NVIDIA-A100-SXM4-80GB", Name: "NVIDIA A100-SXM4-80GB", Architecture: "Ampere", Capability: "8.0.0", MemoryGi: 80},
	"NVIDIA-H100-80GB-HBM3": {Label: "NVIDIA-H100-80GB-HBM3", Name: "NVIDIA H100 80GB HBM3", Architecture: "Hopper", Capability: "9.0.0", MemoryGi: 80},
}

// MIG: one MIG instance of a GPU in MIG mode.
type MIG struct {
	Profile     string // e.g. 1g.10gb
	ProfileID   int    // the GPU instance profile id
	Start, Size int    // its memory slices (of 8)
	MemoryGi    int64
	SMs         int64
}

// Layouts of a GPU in MIG mode (A100/H100 80 GB profiles).
var (
	// SevenSmall: seven 1g.10gb instances.
	SevenSmall = []MIG{{"1g.10gb", 19, 0, 1, 10, 16}, {"1g.10gb", 19, 1, 1, 10, 16}, {"1g.10gb", 19, 2, 1, 10, 16},
		{"1g.10gb", 19, 3, 1, 10, 16}, {"1g.10gb", 19, 4, 1, 10, 16}, {"1g.10gb", 19, 5, 1, 10, 16}, {"1g.10gb", 19, 6, 1, 10, 16}}
	// Mixed: a 3g.40gb and two 2g.20gb.
	Mixed = []MIG{{"3g.40gb", 9, 0, 4, 40, 60}, {"2g.20gb", 14, 4, 2, 20, 32}, {"2g.20gb", 14, 6, 2, 20, 32}}
)

// Node: what the driver publishes for one node: its GPUs, those with a
// layout in MIG mode.
type Node struct {
	Name    string
	Product Product
	GPUs    int
	MIG     map[int][]MIG // GPU minor -> its instances
}

func uuid(kind, node string, parts ...int) string {
	h := fnv.New64a()
	fmt.Fprint(h, kind, node, parts)
	v := h.Sum64()
	return fmt.Sprintf("%s-%08x-%04x-%04x-%04x-%012x", kind, uint32(v>>32), uint16(v>>16), uint16(v), uint16(v>>48)^uint16(len(parts)), v&0xffffffffffff)
}

func str(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
}
func ver(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
}
func num(v int64) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: ptr.To(v)}
}
func qty(v int64) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(v, resource.BinarySI)}
}

// Slice: node n's ResourceSlice.
func (n Node) Slice() *resourceapi.ResourceSlice {
	sl := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-" + Driver},
		Spec: resourceapi.ResourceSliceSpec{Driver: Driver, NodeName: ptr.To(n.Name),
			Pool: resourceapi.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: 1}},
	}
	p := n.Product
	common := func(d *resourceapi.Device, bus string) {
		d.Attributes["productName"] = str(p.Name)
		d.Attributes["brand"] = str("Nvidia")
		d.Attributes["architecture"] = str(p.Architecture)
		d.Attributes["cudaComputeCapability"] = ver(p.Capability)
		d.Attributes["driverVersion"] = ver("570.124.6")
		d.Attributes["cudaDriverVersion"] = ver("12.8.0")
		d.Attributes["pcieBusID"] = str(bus)
	}
	for g := 0; g < n.GPUs; g++ {
		gpuUUID := uuid("GPU", n.Name, g)
		bus := fmt.Sprintf("0000:%02x:00.0", 0x18+g*0x10)
		migs, inMIG := n.MIG[g]
		if !inMIG {
			d := resourceapi.Device{Name: fmt.Sprintf("gpu-%d", g), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": str("gpu"), "uuid": str(gpuUUID), "index": num(int64(g)), "minor": num(int64(g)),
			}, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": qty(p.MemoryGi << 30)}}
			common(&d, bus)
			sl.Spec.Devices = append(sl.Spec.Devices, d)
			continue
		}
		for i, m := range migs {
			d := resourceapi.Device{Name: fmt.Sprintf("gpu-%d-mig-%d-%d-%d", g, m.ProfileID, m.Start, m.Size),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type": str("mig"), "uuid": str(uuid("MIG", n.Name, g, i)), "parentUUID": str(gpuUUID), "profile": str(m.Profile),
				}, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": qty(m.MemoryGi << 30), "multiprocessors": qty(m.SMs),
				}}
			for s := m.Start; s < m.Start+m.Size; s++ {
				d.Capacity[resourceapi.QualifiedName(fmt.Sprintf("memorySlice%d", s))] = qty(1)
			}
			common(&d, bus)
			sl.Spec.Devices = append(sl.Spec.Devices, d)
		}
	}
	return sl
}

// Classes: NVIDIA's DeviceClasses.
func Classes() []*resourceapi.DeviceClass {
	class := func(name, typ string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == '%s'", Driver, Driver, typ)}}}}}
	}
	return []*resourceapi.DeviceClass{class("gpu.nvidia.com", "gpu"), class("mig.nvidia.com", "mig")}
}

// ClassMap: DeviceClasses by name, listed as the allocator lists them.
type ClassMap map[string]*resourceapi.DeviceClass

// ClassLister: NVIDIA's classes (Classes) as a ClassMap.
func ClassLister() ClassMap {
	out := ClassMap{}
	for _, c := range Classes() {
		out[c.Name] = c
	}
	return out
}

func (c ClassMap) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, x := range c {
		out = append(out, x)
	}
	return out, nil
}

func (c ClassMap) Get(name string) (*resourceapi.DeviceClass, error) {
	if x, ok := c[name]; ok {
		return x, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// ForNode: what the driver publishes for a node of the local control
// plane: its product from its nvidia.com/gpu.product label, `gpus` GPUs,
// and, on every `migEvery`-th node (by its position i, from 0; 0: none),
// its last two GPUs in MIG mode (seven 1g.10gb, and a 3g.40gb with two
// 2g.20gb).
func ForNode(n *corev1.Node, i, gpus, migEvery int) Node {
	p, ok := Products[n.Labels["nvidia.com/gpu.product"]]
	if !ok {
		p = Products["NVIDIA-H100-80GB-HBM3"]
	}
	out := Node{Name: n.Name, Product: p, GPUs: gpus}
	if migEvery > 0 && i%migEvery == migEvery-1 && gpus >= 2 {
		out.MIG = map[int][]MIG{gpus - 2: SevenSmall, gpus - 1: Mixed}
	}
	return out
}

// PublishNodes: Publish for every node of the cluster, `gpus` GPUs each
// (ForNode, the nodes in the order of their names' numbers: node-1,
// node-2, ..., node-10).
func PublishNodes(ctx context.Context, cs kubernetes.Interface, gpus, migEvery int) error {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ns := l.Items
	index := func(name string) int {
		i, _ := strconv.Atoi(name[strings.LastIndex(name, "-")+1:])
		return i
	}
	sort.Slice(ns, func(i, j int) bool { return index(ns[i].Name) < index(ns[j].Name) })
	var drv []Node
	for i := range ns {
		drv = append(drv, ForNode(&ns[i], i, gpus, migEvery))
	}
	return Publish(ctx, cs, drv, 8)
}

// Publish creates the DeviceClasses (kept if there) and each node's
// slice, `workers` at a time.
func Publish(ctx context.Context, cs kubernetes.Interface, nodes []Node, workers int) error {
	for _, c := range Classes() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("device class %s: %w", c.Name, err)
		}
	}
	work := make(chan Node)
	errs := make(chan error, len(nodes))
	var wg sync.WaitGroup
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, n.Slice(), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("resource slice of %s: %w", n.Name, err)
				}
			}
		}()
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// Product names as the driver's productName attribute has them.
const (
	H100Name = "NVIDIA H100 80GB HBM3"
	A100Name = "NVIDIA A100-SXM4-80GB"
)

// Want: a device request of the tests' and the bench's mix, and what each
// device allocated for it must be, checked on the device's attributes as
// the slices publish them (independently of the allocator's CEL).
type Want struct {
	Class    string // gpu.nvidia.com or mig.nvidia.com
	Count    int64
	CEL      string
	OK       func(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) bool
	Describe string
}

// Request: w as the request "gpu" of a claim.
func (w Want) Request() resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: w.Class, Count: w.Count,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount}}
	if w.CEL != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: w.CEL}}}
	}
	return r
}

// Spec: a claim spec of w's one request.
func (w Want) Spec() resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{w.Request()}}}
}

// AttrString: a string or version attribute's value ("" if none).
func AttrString(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, k string) string {
	if v, ok := a[resourceapi.QualifiedName(k)]; ok {
		switch {
		case v.StringValue != nil:
			return *v.StringValue
		case v.VersionValue != nil:
			return *v.VersionValue
		}
	}
	return ""
}

func isGPU(product string) func(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) bool {
	return func(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) bool {
		return AttrString(a, "type") == "gpu" && (product == "" || AttrString(a, "productName") == product)
	}
}

func isMIG(profile string) func(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) bool {
	return func(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) bool {
		return AttrString(a, "type") == "mig" && AttrString(a, "profile") == profile
	}
}

const (
	byH100 = "device.attributes['gpu.nvidia.com'].productName == '" + H100Name + "'"
	byA100 = "device.attributes['gpu.nvidia.com'].productName == '" + A100Name + "'"
)

// The mix's requests.
var (
	WantH100x4 = Want{Class: "gpu.nvidia.com", Count: 4, CEL: byH100, OK: isGPU(H100Name), Describe: "4 H100 GPUs"}
	WantH100x8 = Want{Class: "gpu.nvidia.com", Count: 8, CEL: byH100, OK: isGPU(H100Name), Describe: "8 H100 GPUs"}
	WantCC9    = Want{Class: "gpu.nvidia.com", Count: 2, CEL: "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.9.0'))",
		OK: func(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) bool {
			return isGPU("")(a) && AttrString(a, "cudaComputeCapability") >= "9.0.0"
		}, Describe: "2 GPUs of compute capability 9 or more"}
	WantA100  = Want{Class: "gpu.nvidia.com", Count: 1, CEL: byA100, OK: isGPU(A100Name), Describe: "1 A100 GPU"}
	WantMIG   = Want{Class: "mig.nvidia.com", Count: 1, CEL: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'", OK: isMIG("1g.10gb"), Describe: "a 1g.10gb MIG device"}
	WantMIG3g = Want{Class: "mig.nvidia.com", Count: 1, CEL: "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'", OK: isMIG("3g.40gb"), Describe: "a 3g.40gb MIG device"}
	// WantNine: more GPUs than a node has (no node can meet it).
	WantNine = Want{Class: "gpu.nvidia.com", Count: 9, OK: isGPU(""), Describe: "9 GPUs"}
)
