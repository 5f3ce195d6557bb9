package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// certValidity is how long the cluster's certificates last: a cluster may
// stay up for days of manual work.
const certValidity = 365 * 24 * time.Hour

// ca signs every certificate of one cluster.
type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	serial  int64
}

func newCA() (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tierflow-cluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der), serial: 1}, nil
}

// issued is a certificate and its key, PEM-encoded.
type issued struct{ cert, key []byte }

// issue signs a certificate for subject. Server certificates name their
// hosts in dns and ips; client certificates name none.
func (c *ca) issue(subject pkix.Name, server bool, dns []string, ips []net.IP) (issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issued{}, err
	}
	c.serial++
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial),
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return issued{}, err
	}
	keyPEM, err := ecKeyPEM(key)
	if err != nil {
		return issued{}, err
	}
	return issued{cert: pemBlock("CERTIFICATE", der), key: keyPEM}, nil
}

func (c *ca) keyPEM() ([]byte, error) { return ecKeyPEM(c.key) }

func ecKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// kubeconfig renders a kubeconfig for server that authenticates with id.
func kubeconfig(server string, caPEM []byte, user string, id issued) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tierflow"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: id.cert, ClientKeyData: id.key}
	kc.Contexts["tierflow"] = &clientcmdapi.Context{Cluster: "tierflow", AuthInfo: user}
	kc.CurrentContext = "tierflow"
	return clientcmd.Write(*kc)
}

// writeFiles writes name → content under dir with mode 0600 (keys and
// credentials among them).
func writeFiles(dir string, files map[string][]byte) error {
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// clusterPKI issues what the control plane and every node need and returns
// each node's /etc/kubernetes files (relative paths → content) and the
// admin kubeconfig for the host. The control-plane node also gets the CA
// key, the service-account key pair and the API server's certificates.
func clusterPKI(c *Cluster) (perNode map[string]map[string][]byte, adminKubeconfig []byte, err error) {
	authority, err := newCA()
	if err != nil {
		return nil, nil, err
	}
	server := c.APIServer()
	cp := c.Nodes[0]
	apiserver, err := authority.issue(pkix.Name{CommonName: "kube-apiserver"}, true,
		[]string{"localhost", cp.Name, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(cp.IP), net.ParseIP(c.APIServiceIP)})
	if err != nil {
		return nil, nil, err
	}
	// The API server's identity towards kubelets (logs, exec, port-forward).
	kubeletClient, err := authority.issue(pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, false, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	caKey, err := authority.keyPEM()
	if err != nil {
		return nil, nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	saKeyPEM, err := ecKeyPEM(saKey)
	if err != nil {
		return nil, nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, nil, err
	}
	users := map[string]pkix.Name{
		"controller-manager.conf": {CommonName: "system:kube-controller-manager"},
		"scheduler.conf":          {CommonName: "system:kube-scheduler"},
		"admin.conf":              {CommonName: "tierflow-cluster-admin", Organization: []string{"system:masters"}},
		"kube-proxy.conf":         {CommonName: "system:kube-proxy"},
	}
	confs := map[string][]byte{}
	for file, subject := range users {
		id, err := authority.issue(subject, false, nil, nil)
		if err != nil {
			return nil, nil, err
		}
		// Control-plane components talk to the API server on their own node.
		target := server
		if file == "controller-manager.conf" || file == "scheduler.conf" {
			target = "https://127.0.0.1:6443"
		}
		if confs[file], err = kubeconfig(target, authority.certPEM, subject.CommonName, id); err != nil {
			return nil, nil, err
		}
	}
	perNode = map[string]map[string][]byte{}
	for i, n := range c.Nodes {
		id, err := authority.issue(pkix.Name{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"}}, false, nil, nil)
		if err != nil {
			return nil, nil, err
		}
		kubelet, err := kubeconfig(server, authority.certPEM, "system:node:"+n.Name, id)
		if err != nil {
			return nil, nil, err
		}
		files := map[string][]byte{
			"pki/ca.crt":      authority.certPEM,
			"kubelet.conf":    kubelet,
			"kube-proxy.conf": confs["kube-proxy.conf"],
		}
		if i == 0 {
			files["pki/ca.key"] = caKey
			files["pki/apiserver.crt"] = apiserver.cert
			files["pki/apiserver.key"] = apiserver.key
			files["pki/apiserver-kubelet-client.crt"] = kubeletClient.cert
			files["pki/apiserver-kubelet-client.key"] = kubeletClient.key
			files["pki/sa.key"] = saKeyPEM
			files["pki/sa.pub"] = pemBlock("PUBLIC KEY", saPubDER)
			files["controller-manager.conf"] = confs["controller-manager.conf"]
			files["scheduler.conf"] = confs["scheduler.conf"]
			files["admin.conf"] = confs["admin.conf"]
		}
		perNode[n.Name] = files
	}
	return perNode, confs["admin.conf"], nil
}
