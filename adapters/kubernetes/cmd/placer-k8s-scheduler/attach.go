package main

// The CSI volumes pods attach to their nodes, and what the nodes can
// attach, as kube-scheduler's NodeVolumeLimits reads them
// (translate.Attacher; the limits are applied in translate/attach.go).
// A claim bound to a CSI volume is its driver's volume handle; a claim not
// bound yet is one of its StorageClass's provisioner, by a name of its own.
// A volume of an in-tree plugin (awsElasticBlockStore, a class of
// kubernetes.io/aws-ebs: EKS's default gp2), bound, unbound or named in
// the pod itself, is translated to the CSI driver it migrates to, as
// kube-scheduler counts it.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	csitrans "k8s.io/csi-translation-lib"
	csiplugins "k8s.io/csi-translation-lib/plugins"
	"k8s.io/klog/v2"
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
	vols map[types.UID]map[string]translate.CSIVolume
}

func (s *scheduler) attacher() *attacher {
	return &attacher{s: s, vols: map[types.UID]map[string]translate.CSIVolume{}}
}

// inTree: the CSI translation of in-tree volumes (csi-translation-lib).
var inTree = csitrans.New()

// migrated: whether kube-scheduler counts in-tree plugin's volumes under
// the CSI driver it migrates to (isCSIMigrationOn, v1.37).
func migrated(plugin string) bool {
	switch plugin {
	case csiplugins.AWSEBSInTreePluginName, csiplugins.PortworxVolumePluginName, csiplugins.GCEPDInTreePluginName,
		csiplugins.AzureDiskInTreePluginName, csiplugins.CinderInTreePluginName:
		return true
	}
	return false
}

func (a *attacher) Volumes(p *corev1.Pod) map[string]translate.CSIVolume {
	if v, ok := a.vols[p.UID]; ok {
		return v
	}
	var out map[string]translate.CSIVolume
	add := func(d, h string, old bool) {
		if d != "" && h != "" {
			if out == nil {
				out = map[string]translate.CSIVolume{}
			}
			out[d+"/"+h] = translate.CSIVolume{Driver: d, InTree: old}
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil && v.Ephemeral == nil { // an in-tree disk named in the pod
			add(inlineVolume(&v, p.Namespace))
		}
	}
	for _, name := range translate.ClaimNames(p) {
		c, err := a.s.pvcs.PersistentVolumeClaims(p.Namespace).Get(name)
		if err != nil { // (a pending pod's missing claim holds it: volumeHold)
			continue
		}
		add(a.s.csiVolume(c))
	}
	a.vols[p.UID] = out
	return out
}

// inlineVolume: an in-tree volume of a pod's own, translated to its CSI
// driver's (kube-scheduler's checkAttachableInlineVolume). "": not one.
func inlineVolume(v *corev1.Volume, ns string) (driver, handle string, old bool) {
	if !inTree.IsInlineMigratable(v) {
		return "", "", false
	}
	plugin, err := inTree.GetInTreePluginNameFromSpec(nil, v)
	if err != nil || !migrated(plugin) {
		return "", "", false
	}
	pv, err := inTree.TranslateInTreeInlineVolumeToCSI(klog.Background(), v, ns)
	if err != nil || pv == nil || pv.Spec.CSI == nil {
		return "", "", false
	}
	return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle, true
}

// csiVolume: claim c's CSI driver and volume handle (kube-scheduler's
// getCSIDriverInfo): its volume's (an in-tree plugin's translated to its
// CSI driver's: old), else, not bound or its volume not there, its class's
// provisioner's and a handle of the claim's name. "": not a CSI volume.
func (s *scheduler) csiVolume(c *corev1.PersistentVolumeClaim) (driver, handle string, old bool) {
	if c.Spec.VolumeName != "" {
		if pv, err := s.pvs.Get(c.Spec.VolumeName); err == nil {
			if pv.Spec.CSI != nil {
				return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle, false
			}
			if !inTree.IsPVMigratable(pv) {
				return "", "", false
			}
			if plugin, err := inTree.GetInTreePluginNameFromSpec(pv, nil); err != nil || !migrated(plugin) {
				return "", "", false
			}
			if t, err := inTree.TranslateInTreePVToCSI(klog.Background(), pv); err == nil && t.Spec.CSI != nil {
				return t.Spec.CSI.Driver, t.Spec.CSI.VolumeHandle, true
			}
			return "", "", false
		}
	}
	name := storagehelpers.GetPersistentVolumeClaimClass(c)
	if name == "" {
		return "", "", false
	}
	class, err := s.classes.Get(name)
	if err != nil {
		return "", "", false
	}
	handle = fmt.Sprintf("placer-unbound-%s/%s", c.Namespace, c.Name)
	if !inTree.IsMigratableIntreePluginByName(class.Provisioner) {
		return class.Provisioner, handle, false
	}
	if !migrated(class.Provisioner) {
		return "", "", false
	}
	d, err := inTree.GetCSINameFromInTreeName(class.Provisioner)
	if err != nil {
		return "", "", false
	}
	return d, handle, true
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
