package kubeapi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// CRD names one of the network-policy-api CRDs in manifests/crds by its
// resource (plural) name.
type CRD string

const (
	CRDAdminNetworkPolicy         CRD = "adminnetworkpolicies"
	CRDBaselineAdminNetworkPolicy CRD = "baselineadminnetworkpolicies"
	CRDClusterNetworkPolicy       CRD = "clusternetworkpolicies"
)

// AllCRDs are the network-policy-api CRDs tierflow serves.
var AllCRDs = []CRD{CRDAdminNetworkPolicy, CRDBaselineAdminNetworkPolicy, CRDClusterNetworkPolicy}

// PolicyGroup is the API group of the network-policy-api CRDs.
const PolicyGroup = "policy.networking.k8s.io"

// Name is the CRD object's metadata.name.
func (c CRD) Name() string { return string(c) + "." + PolicyGroup }

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CRDOptions selects which CRDs InstallCRDs installs, and how.
type CRDOptions struct {
	// CRDs to install; empty means AllCRDs.
	CRDs []CRD
	// WithoutValidation replaces each version's OpenAPI schema with one that
	// accepts any object (status subresource kept), so tests can create
	// objects the real CRD would reject: an invalid tier, priority out of
	// range, a BaselineAdminNetworkPolicy not named "default".
	WithoutValidation bool
}

// LoadCRD reads a CRD manifest from manifests/crds as an unstructured
// object.
func LoadCRD(crd CRD) (*unstructured.Unstructured, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "manifests", "crds", PolicyGroup+"_"+string(crd)+".yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading CRD manifest (regenerate with `make crds`): %w", err)
	}
	// The manifest is a single document after a generated-by comment.
	var doc []byte
	for _, part := range bytes.Split(raw, []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(part))) > 0 {
			if doc != nil {
				return nil, fmt.Errorf("%s: more than one YAML document", path)
			}
			doc = part
		}
	}
	obj := &unstructured.Unstructured{}
	jsonDoc, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := obj.UnmarshalJSON(jsonDoc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if obj.GetKind() != "CustomResourceDefinition" || obj.GetName() != crd.Name() {
		return nil, fmt.Errorf("%s: expected CustomResourceDefinition %s, found %s %s", path, crd.Name(), obj.GetKind(), obj.GetName())
	}
	return obj, nil
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// InstallCRDs creates (or replaces) CRDs and waits until each is Established
// and served by discovery.
func (c *Cluster) InstallCRDs(t testing.TB, opts CRDOptions) {
	t.Helper()
	crds := opts.CRDs
	if len(crds) == 0 {
		crds = AllCRDs
	}
	ctx := context.Background()
	for _, crd := range crds {
		obj, err := LoadCRD(crd)
		if err != nil {
			t.Fatalf("kubeapi: %v", err)
		}
		if opts.WithoutValidation {
			if err := dropValidation(obj); err != nil {
				t.Fatalf("kubeapi: %s: %v", crd, err)
			}
		}
		client := c.Dynamic.Resource(crdResource)
		existing, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = client.Create(ctx, obj, metav1.CreateOptions{})
		case err == nil:
			obj.SetResourceVersion(existing.GetResourceVersion())
			_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("kubeapi: installing CRD %s: %v", crd.Name(), err)
		}
	}
	for _, crd := range crds {
		if err := c.waitCRDServed(ctx, crd); err != nil {
			t.Fatalf("kubeapi: CRD %s: %v", crd.Name(), err)
		}
	}
}

// DeleteCRDs deletes CRDs (and with them every object of their kinds) and
// waits until they are gone.
func (c *Cluster) DeleteCRDs(t testing.TB, crds ...CRD) {
	t.Helper()
	ctx := context.Background()
	client := c.Dynamic.Resource(crdResource)
	for _, crd := range crds {
		if err := client.Delete(ctx, crd.Name(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("kubeapi: deleting CRD %s: %v", crd.Name(), err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := client.Get(ctx, crd.Name(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("kubeapi: CRD %s not deleted: %v", crd.Name(), err)
		}
	}
}

func (c *Cluster) waitCRDServed(ctx context.Context, crd CRD) error {
	client := c.Dynamic.Resource(crdResource)
	var versions []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		obj, err := client.Get(ctx, crd.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		established := false
		for _, raw := range conds {
			cond, _ := raw.(map[string]interface{})
			if cond["type"] == "Established" && cond["status"] == "True" {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		versions = versions[:0]
		specVersions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
		for _, raw := range specVersions {
			v, _ := raw.(map[string]interface{})
			if served, _ := v["served"].(bool); served {
				name, _ := v["name"].(string)
				versions = append(versions, name)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("not Established: %w", err)
	}
	// Established means the API server accepts the kind; discovery (which
	// informer-based clients consult) catches up a moment later.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		for _, v := range versions {
			list, err := c.Kube.Discovery().ServerResourcesForGroupVersion(PolicyGroup + "/" + v)
			if err != nil {
				return false, nil
			}
			found := false
			for _, r := range list.APIResources {
				if r.Name == string(crd) {
					found = true
				}
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})
}

// dropValidation replaces every version's schema with an accept-anything
// object schema.
func dropValidation(obj *unstructured.Unstructured) error {
	versions, found, err := unstructured.NestedSlice(obj.Object, "spec", "versions")
	if err != nil || !found {
		return fmt.Errorf("spec.versions missing: %v", err)
	}
	for i, raw := range versions {
		v, ok := raw.(map[string]interface{})
		if !ok {
			return fmt.Errorf("spec.versions[%d] is not an object", i)
		}
		v["schema"] = map[string]interface{}{
			"openAPIV3Schema": map[string]interface{}{
				"type":                                 "object",
				"x-kubernetes-preserve-unknown-fields": true,
			},
		}
		versions[i] = v
	}
	return unstructured.SetNestedSlice(obj.Object, versions, "spec", "versions")
}
