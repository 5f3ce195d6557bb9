package livecluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/tierflow/tierflow/test/kubeapi"
)

// AgentKubeconfig applies the agent's RBAC from manifests/tierflow.yaml
// (its ClusterRole and ClusterRoleBinding) to kube and writes, into dir, a
// kubeconfig authenticating as the agent's service account (a client
// certificate with its user name), so agents watching Nodes run with
// exactly the permissions a cluster gives them. It returns the file.
func AgentKubeconfig(t testing.TB, kube *kubeapi.Cluster, dir string) string {
	t.Helper()
	ctx := context.Background()
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "manifests", "tierflow.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Metadata.Name != "tierflow-agent" {
			continue
		}
		switch meta.Kind {
		case "ClusterRole":
			var role rbacv1.ClusterRole
			if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
				t.Fatal(err)
			}
			if _, err := kube.Kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			found++
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := yaml.Unmarshal([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			if _, err := kube.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			found++
		}
	}
	if found != 2 {
		t.Fatalf("manifests/tierflow.yaml: found %d of the agent's ClusterRole and ClusterRoleBinding", found)
	}
	rc := kube.ConfigFor(t, "system:serviceaccount:"+AgentNamespace+":"+AgentSA, "system:serviceaccounts", "system:serviceaccounts:"+AgentNamespace)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "agent"}
	kc.CurrentContext = "c"
	path := filepath.Join(dir, "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
