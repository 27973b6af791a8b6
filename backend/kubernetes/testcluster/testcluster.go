// Package testcluster does, on the single-node cluster of scripts/k8s.sh,
// what a cluster's admin does once for sandbash (a claim of a node
// directory, sandbash's seccomp profile in the kubelet's directory), for
// the kubernetes backend's tests and cmd/sandbash-bench.
package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	sbk8s "github.com/sandbash/sandbash/backend/kubernetes"
)

// Kubeconfig is where scripts/k8s.sh writes the cluster's admin
// kubeconfig.
const Kubeconfig = "/run/sandbash-k8s/kubeconfig"

// KubeletSeccompDir is the seccomp directory of scripts/k8s.sh's kubelet.
const KubeletSeccompDir = "/var/lib/sandbash-k8s/kubelet/seccomp"

// Clientset connects to the cluster that KUBECONFIG names, else to
// scripts/k8s.sh's (setting KUBECONFIG to it, for sandbash), and checks
// that it answers.
func Clientset() (*kubernetes.Clientset, error) {
	if os.Getenv("KUBECONFIG") == "" {
		if _, err := os.Stat(Kubeconfig); err == nil {
			os.Setenv("KUBECONFIG", Kubeconfig)
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster (scripts/k8s.sh up makes one): %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("the cluster does not answer (scripts/k8s.sh up makes one): %w", err)
	}
	return cs, nil
}

// LocalClaim makes, as the cluster's admin would, a local PersistentVolume
// of the node directory dir bound to the claim name in namespace, and
// returns what removes both. A local volume is how Kubernetes puts a
// node's directory in a claim; the pods get no hostPath. No
// controller-manager runs in the test cluster: it binds them as the volume
// binder would.
func LocalClaim(ctx context.Context, cs kubernetes.Interface, namespace, name, dir string) (func(), error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		return nil, fmt.Errorf("want the single node of scripts/k8s.sh: %v, %d nodes", err, len(nodes.Items))
	}
	node := nodes.Items[0].Name
	pvName := name + "-" + node
	fs := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &fs,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: namespace, Name: name},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &empty,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	cleanup := func() {
		// No controller removes the protection finalizers here.
		nofin := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = cs.CoreV1().PersistentVolumeClaims(namespace).Patch(ctx, name, types.MergePatchType, nofin, metav1.PatchOptions{})
		_, _ = cs.CoreV1().PersistentVolumes().Patch(ctx, pvName, types.MergePatchType, nofin, metav1.PatchOptions{})
		_ = cs.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{})
	}
	cleanup()
	err = func() error {
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		c, err := cs.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		c.Status.Phase = corev1.ClaimBound
		c.Status.AccessModes = pvc.Spec.AccessModes
		c.Status.Capacity = pv.Spec.Capacity
		if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return err
		}
		v, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Spec.ClaimRef.UID = c.UID
		if v, err = cs.CoreV1().PersistentVolumes().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
			return err
		}
		v.Status.Phase = corev1.VolumeBound
		_, err = cs.CoreV1().PersistentVolumes().UpdateStatus(ctx, v, metav1.UpdateOptions{})
		return err
	}()
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("making the claim %s of %s: %w", name, dir, err)
	}
	return cleanup, nil
}

// InstallSeccomp puts sandbash's profile where the node's kubelet finds
// it, as the cluster's admin would on every node. It stays there until
// the cluster is taken down (scripts/k8s.sh down removes the kubelet's
// state): test binaries of several packages install the same profile at
// the same time, and one removing it when done failed the others' pods.
// The returned func does nothing; it is kept for the callers' cleanups.
func InstallSeccomp() (func(), error) {
	name, body, err := sbk8s.SeccompProfile()
	if err != nil {
		return nil, err
	}
	p := filepath.Join(KubeletSeccompDir, name)
	if _, err := os.Stat(KubeletSeccompDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	// A whole file or none: another package's pods may be reading it.
	tmp, err := os.CreateTemp(filepath.Dir(p), ".profile-*")
	if err != nil {
		return nil, err
	}
	_, err = tmp.Write(body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return nil, err
	}
	return func() {}, nil
}

// ApplyRBAC applies the Role, RoleBinding, ClusterRole and
// ClusterRoleBinding of the RBAC file at path (deploy/kubernetes/rbac.yaml)
// as the cluster's admin would, bound to subject instead of the file's,
// and returns what removes them. The Role and RoleBinding are named name,
// the ClusterRole and ClusterRoleBinding name+"-read", so that tests
// running at the same time can each bind their own.
func ApplyRBAC(ctx context.Context, cs kubernetes.Interface, namespace, path, name string, subject rbacv1.Subject) (func(), error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rb := cs.RbacV1()
	zero := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	var undo []func()
	cleanup := func() {
		for _, u := range undo {
			u()
		}
	}
	read := name + "-read"
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			cleanup()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var doc struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			cleanup()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch doc.Kind {
		case "Role":
			var o rbacv1.Role
			err = json.Unmarshal(raw, &o)
			o.Name = name
			_ = rb.Roles(namespace).Delete(ctx, o.Name, del)
			if err == nil {
				_, err = rb.Roles(namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
			undo = append(undo, func() { _ = rb.Roles(namespace).Delete(ctx, o.Name, del) })
		case "RoleBinding":
			var o rbacv1.RoleBinding
			err = json.Unmarshal(raw, &o)
			o.Name, o.RoleRef.Name, o.Subjects = name, name, []rbacv1.Subject{subject}
			_ = rb.RoleBindings(namespace).Delete(ctx, o.Name, del)
			if err == nil {
				_, err = rb.RoleBindings(namespace).Create(ctx, &o, metav1.CreateOptions{})
			}
			undo = append(undo, func() { _ = rb.RoleBindings(namespace).Delete(ctx, o.Name, del) })
		case "ClusterRole":
			var o rbacv1.ClusterRole
			err = json.Unmarshal(raw, &o)
			o.Name = read
			_ = rb.ClusterRoles().Delete(ctx, o.Name, del)
			if err == nil {
				_, err = rb.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
			}
			undo = append(undo, func() { _ = rb.ClusterRoles().Delete(ctx, o.Name, del) })
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			err = json.Unmarshal(raw, &o)
			o.Name, o.RoleRef.Name, o.Subjects = read, read, []rbacv1.Subject{subject}
			_ = rb.ClusterRoleBindings().Delete(ctx, o.Name, del)
			if err == nil {
				_, err = rb.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
			}
			undo = append(undo, func() { _ = rb.ClusterRoleBindings().Delete(ctx, o.Name, del) })
		default:
			err = fmt.Errorf("unexpected kind %q", doc.Kind)
		}
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("applying %s's %s: %w", path, doc.Kind, err)
		}
	}
	return cleanup, nil
}
