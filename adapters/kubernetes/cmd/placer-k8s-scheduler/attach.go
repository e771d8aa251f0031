package main

// The CSI volumes pods attach to their nodes, and what the nodes can
// attach, as kube-scheduler's NodeVolumeLimits reads them
// (translate.Attacher; the limits are applied in translate/attach.go).
// A claim bound to a CSI volume is its driver's volume handle; a claim not
// bound yet is one of its StorageClass's provisioner, by a name of its own.
// A volume of an in-tree plugin, which kube-scheduler counts under the CSI
// driver it migrates to, is not counted.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"placer.local/kubernetes/internal/translate"
)

// byNode: the VolumeAttachment informer's index by node.
const byNode = "node"

func attachmentNode(o any) ([]string, error) {
	if va, ok := o.(*storagev1.VolumeAttachment); ok {
		return []string{va.Spec.NodeName}, nil
	}
	return nil, nil
}

// attacher: a cycle's translate.Attacher; each pod's volumes read once.
type attacher struct {
	s    *scheduler
	vols map[types.UID]map[string]string
}

func (s *scheduler) attacher() *attacher {
	return &attacher{s: s, vols: map[types.UID]map[string]string{}}
}

func (a *attacher) Volumes(p *corev1.Pod) map[string]string {
	if v, ok := a.vols[p.UID]; ok {
		return v
	}
	var out map[string]string
	for _, name := range claimNames(p) {
		c, err := a.s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil { // (a pending pod's missing claim holds it: volumeHold)
			continue
		}
		if d, h := a.s.csiVolume(c); d != "" && h != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[d+"/"+h] = d
		}
	}
	a.vols[p.UID] = out
	return out
}

// csiVolume: claim c's CSI driver and volume handle (kube-scheduler's
// getCSIDriverInfo): its volume's, else, not bound or its volume not there,
// its class's provisioner's and a handle of the claim's name. "": not a CSI
// volume.
func (s *scheduler) csiVolume(c *corev1.PersistentVolumeClaim) (driver, handle string) {
	if c.Spec.VolumeName != "" {
		if pv, err := s.pvs.Get(c.Spec.VolumeName); err == nil {
			if pv.Spec.CSI == nil {
				return "", ""
			}
			return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
		}
	}
	name := storagehelpers.GetPersistentVolumeClaimClass(c)
	if name == "" {
		return "", ""
	}
	class, err := s.classes.Get(name)
	if err != nil {
		return "", ""
	}
	return class.Provisioner, fmt.Sprintf("placer-unbound-%s/%s", c.Namespace, c.Name)
}

func (a *attacher) Node(name string) translate.NodeAttach {
	var out translate.NodeAttach
	if cn, err := a.s.csiNodes.Get(name); err == nil {
		out.Drivers = map[string]int64{}
		for _, d := range cn.Spec.Drivers {
			out.Drivers[d.Name] = -1
			if d.Allocatable != nil && d.Allocatable.Count != nil {
				out.Drivers[d.Name] = int64(*d.Allocatable.Count)
			}
		}
	}
	vas, _ := a.s.attachments.ByIndex(byNode, name)
	for _, o := range vas {
		va, ok := o.(*storagev1.VolumeAttachment)
		if !ok || va.Spec.Attacher == "" || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := a.s.pvs.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil {
			continue
		}
		if out.Attached == nil {
			out.Attached = map[string]string{}
		}
		out.Attached[va.Spec.Attacher+"/"+pv.Spec.CSI.VolumeHandle] = va.Spec.Attacher
	}
	return out
}

func (a *attacher) Required(d string) bool {
	cd, err := a.s.drivers.Get(d)
	return err == nil && ptr.Deref(cd.Spec.PreventPodSchedulingIfMissing, false)
}
