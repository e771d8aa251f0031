package main

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func benchPod(cpuMilli, gpus int64) *corev1.Pod {
	rl := corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI)}
	if gpus > 0 {
		rl["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl}}}}}
}

// FGD as the simulator defines it: M covers 95% of the pods fed (most
// frequent first), and a node's fragmentation is, per task, all its free
// GPUs when the task cannot run there.
func TestFGDOfWholeGPUNodes(t *testing.T) {
	var pods []*corev1.Pod
	for i := 0; i < 10; i++ {
		pods = append(pods, benchPod(4000, 1)) // 50%
	}
	for i := 0; i < 6; i++ {
		pods = append(pods, benchPod(16000, 4)) // 30%
	}
	for i := 0; i < 3; i++ {
		pods = append(pods, benchPod(1000, 0)) // 15%: CPU-only
	}
	pods = append(pods, benchPod(64000, 8)) // 5%: past the 95% covered
	m := typicalTasks(pods)
	if len(m) != 3 || m[0].gpus != 1 || m[1].gpus != 4 || m[2].gpus != 0 {
		t.Fatalf("M: %+v", m)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(m[0].freq, 10.0/19) || !near(m[1].freq, 6.0/19) || !near(m[2].freq, 3.0/19) {
		t.Errorf("frequencies: %+v", m)
	}
	// 2 GPUs free and plenty of CPU: the 4-GPU task and the CPU-only one
	// cannot use them: (6+3)/19 of 2000 milli.
	if f := nodeFragmentation(2, 100000, m); !near(f, 9.0/19*2000) {
		t.Errorf("2 GPUs free: %v", f)
	}
	// 4 free but 3 CPUs: no GPU task runs: all 4000 milli.
	if f := nodeFragmentation(4, 3000, m); !near(f, 4000) {
		t.Errorf("4 GPUs free, 3 CPUs: %v", f)
	}
	if f := nodeFragmentation(0, 100000, m); f != 0 {
		t.Errorf("no GPU free: %v", f)
	}
}
