package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/tierflow/tierflow/test/livecluster"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// TestNoEncapNewPodAdmission: a new pod has no connectivity until its
// node's agent holds the policies that apply to it at a generation that
// includes it — as a subject (its isolation) and as a peer (its address
// in every node's groups) — on two noEncap nodes with the real CNI
// plugin, agents, controller, API server and packets:
//
//   - with the controller up, tierflow-cni ADD returns only once the pod
//     is admitted: from the first packet an isolated pod is isolated, and
//     a pod another node's policy denies as a peer is denied;
//   - with the controller down, ADD fails (not admitted, the agent says
//     why) and leaves nothing; a port attached without waiting stays dark,
//     in both directions, for the whole outage; once the controller is
//     back the pods are admitted with their policies;
//   - a port of a deleted pod is not admitted for the pod created again
//     under its name (another UID), and a new pod reusing an address of a
//     pod still in the API (terminating) is not admitted until that pod
//     is gone: it never carries the old pod's identity.
//
// Before admission, the agent classified a port as soon as OVSDB named its
// pod: the ADD did not wait, the ports attached during the outage were
// open (the isolated pod reachable by anyone, the denied peer reaching its
// target), and the reused address passed as the old pod's.
func TestNoEncapNewPodAdmission(t *testing.T) {
	bed := newNoEncapBed(t)
	c, n1, n2 := bed.c, bed.n1, bed.n2
	ctx := context.Background()

	// db pods take connections from role=friend only; target pods are
	// denied anything from role=evil pods (enforced at the target's node,
	// where evil pods are peers).
	createIngressFromPods(t, c, "db-friends", map[string]string{"app": "db"}, map[string]string{"role": "friend"})
	anp := &anpv1.AdminNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-evil"},
		Spec: anpv1.AdminNetworkPolicySpec{
			Priority: 10,
			Subject:  anpv1.AdminNetworkPolicySubject{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "target"}}}},
			Ingress: []anpv1.AdminNetworkPolicyIngressRule{{Name: "no-evil", Action: anpv1.AdminNetworkPolicyRuleActionDeny,
				From: []anpv1.AdminNetworkPolicyIngressPeer{{Pods: &anpv1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "evil"}}}}}}},
		},
	}
	if _, err := c.Kube.Policy.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, anp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrl := c.StartController(t)
	ag1 := bed.startAgent(t, n1, 1, bed.kubeconfig)
	ag2 := bed.startAgent(t, n2, 2, bed.kubeconfig)
	ag1.RealizedOn(t)
	ag2.RealizedOn(t)
	livecluster.Eventually(t, 60*time.Second, "gateways and routes", func() error {
		if err := checkNodeNet(n1, []string{"10.77.1.1/24"}, []string{"10.77.2.0/24 via 192.168.77.2", "fd00:77:2::/64 via fd00:77::2"}); err != nil {
			return err
		}
		return checkNodeNet(n2, []string{"10.77.2.1/24"}, []string{"10.77.1.0/24 via 192.168.77.1", "fd00:77:1::/64 via fd00:77::1"})
	})

	a := bed.attach(t, n1, "a", map[string]string{"app": "a"})
	friend := bed.attach(t, n1, "friend", map[string]string{"role": "friend"})
	target := bed.attach(t, n2, "target", map[string]string{"app": "target"})
	for _, p := range []*ovsenv.Pod{a, friend, target} {
		p.ListenTCP(8080)
	}

	// Controller up: ADD returns once the pod is admitted, so the first
	// packets already meet its policies.
	db := bed.attach(t, n2, "db", map[string]string{"app": "db"})
	db.ListenTCP(8080)
	evil := bed.attach(t, n1, "evil", map[string]string{"role": "evil"})
	probe(t, "new pods, controller up", []flow{
		{a, db, 8080, "tcp", false},
		{friend, db, 8080, "tcp", true},
		{evil, target, 8080, "tcp", false},
		{evil, a, 8080, "tcp", true},
		{db, a, 8080, "tcp", true},
	}...)

	// oldfriend is a friend of db; its address will be reused while the
	// controller is down.
	oldfriendObj := c.CreatePod(t, "oldfriend", n1.name, map[string]string{"role": "friend"})
	oldfriend, err := cniAdd(t, n1, bed.cniBin, "oldfriend", string(oldfriendObj.UID))
	if err != nil {
		t.Fatal(err)
	}
	c.SetPodRunning(t, oldfriendObj, oldfriend.Addrs)
	livecluster.Eventually(t, 30*time.Second, "oldfriend a peer of db", func() error {
		return oldfriend.ProbeTCP(netip.AddrPortFrom(db.IPv4(), 8080), time.Second)
	})

	// The controller goes down.
	ctrl.Kill()
	// ADD waits, then fails with the agent's reason, leaving nothing.
	obj := c.CreatePod(t, "db-late", n2.name, map[string]string{"app": "db"})
	_, err = cniAddConf(t, n2, withAdmissionTimeout(t, n2.cniConf, "3s"), bed.cniBin, "db-late", string(obj.UID))
	if err == nil || !strings.Contains(err.Error(), "not admitted") || !strings.Contains(err.Error(), "does not list the pod") {
		t.Errorf("CNI ADD with the controller down: %v, want not admitted (the controller's state does not list the pod)", err)
	}
	if out, _ := n2.env.Vsctl("--columns=name", "find", "Interface", `external_ids:"tierflow.io/pod-name"=db-late`); strings.TrimSpace(out) != "" {
		t.Errorf("failed ADD left a port: %s", out)
	}
	// A port attached without waiting (a runtime that does not wait): its
	// pod is a subject (db2, isolated) and a peer (evil2, denied at the
	// target's node) of policies the agents do not have for it.
	noWait := func(n *simNode, name string, labels map[string]string) *ovsenv.Pod {
		t.Helper()
		obj := c.CreatePod(t, name, n.name, labels)
		p, err := cniAddConf(t, n, withAdmissionTimeout(t, n.cniConf, "0s"), bed.cniBin, name, string(obj.UID))
		if err != nil {
			t.Fatal(err)
		}
		c.SetPodRunning(t, obj, p.Addrs)
		return p
	}
	db2 := noWait(n2, "db2", map[string]string{"app": "db"})
	db2.ListenTCP(8080)
	evil2 := noWait(n1, "evil2", map[string]string{"role": "evil"})
	evil2.ListenTCP(8080)
	time.Sleep(2 * time.Second) // what the agents would do, they have done
	probe(t, "new pods, controller down", []flow{
		{a, db2, 8080, "tcp", false},
		{friend, db2, 8080, "tcp", false},
		{db2, a, 8080, "tcp", false},
		{evil2, target, 8080, "tcp", false},
		{evil2, a, 8080, "tcp", false},
		{a, evil2, 8080, "tcp", false},
		// The pods admitted before keep working.
		{friend, db, 8080, "tcp", true},
		{evil, a, 8080, "tcp", true},
	}...)
	// oldfriend is deleted (its port and address released) and a new pod
	// of node 1 gets its IPv4 address, all while the controller is down:
	// node 2 still holds that address in db's friends, so the new pod
	// would pass as oldfriend if its port were classified (as it was
	// before admission, when OVSDB naming the pod was enough: with the
	// agent admitting ports its state does not list, this test saw the
	// new pod reach db, and a reach it and be reached). Node 1's agent
	// does not list the new pod: its port stays dark.
	if err := c.Kube.Kube.CoreV1().Pods(ovsenv.PodNamespace).Delete(ctx, "oldfriend", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	cniDel(t, n1, bed.cniBin, "oldfriend", string(oldfriendObj.UID))
	reuserObj := c.CreatePod(t, "reuser", n1.name, map[string]string{"app": "reuser"})
	confN1 := n1.cniConf
	n1.cniConf = withAdmissionTimeout(t, confN1, "0s")
	reuser, err := cniAddArgs(t, n1, bed.cniBin, "reuser", string(reuserObj.UID), "IP="+oldfriend.IPv4().String())
	n1.cniConf = confN1
	if err != nil {
		t.Fatal(err)
	}
	if reuser.IPv4() != oldfriend.IPv4() {
		t.Fatalf("reuser got %v, want oldfriend's %v", reuser.IPv4(), oldfriend.IPv4())
	}
	c.SetPodRunning(t, reuserObj, reuser.Addrs)
	reuser.ListenTCP(8080)
	time.Sleep(2 * time.Second)
	probe(t, "reused address, controller down", []flow{
		{reuser, db, 8080, "tcp", false},
		{reuser, a, 8080, "tcp", false},
		{a, reuser, 8080, "tcp", false},
	}...)

	st, err := ag2.Q.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pods {
		if p.Name == "db2" && !strings.Contains(p.Error, "not admitted") {
			t.Errorf("agent's view of db2: %+v, want not admitted", p)
		}
	}

	// The controller is back: the pods are admitted, with their policies.
	c.StartController(t)
	livecluster.Eventually(t, 60*time.Second, "db2 and evil2 admitted", func() error {
		for _, x := range []struct {
			ag   *livecluster.Agent
			name string
		}{{ag2, "db2"}, {ag1, "evil2"}, {ag1, "reuser"}} {
			pods, err := x.ag.Q.Pods(ctx)
			if err != nil {
				return err
			}
			for _, p := range pods.Pods {
				if p.Name == x.name && p.Error != "" {
					return fmt.Errorf("%s: %s", x.name, p.Error)
				}
			}
		}
		return nil
	})
	probe(t, "controller back", []flow{
		{a, db2, 8080, "tcp", false},
		{friend, db2, 8080, "tcp", true},
		{db2, a, 8080, "tcp", true},
		{evil2, target, 8080, "tcp", false},
		{evil2, a, 8080, "tcp", true},
		// reuser is admitted as itself: no friend of db.
		{reuser, db, 8080, "tcp", false},
		{reuser, a, 8080, "tcp", true},
	}...)

	// A pod deleted and created again under its name: the old port (its
	// CNI DEL not run yet) is not the new pod's.
	pods := c.Kube.Kube.CoreV1().Pods(ovsenv.PodNamespace)
	if err := pods.Delete(ctx, "db2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	again := c.CreatePod(t, "db2", n2.name, map[string]string{"app": "db", "role": "friend"})
	c.SetPodRunning(t, again, db2.Addrs)
	time.Sleep(2 * time.Second)
	probe(t, "stale port of a deleted pod", []flow{
		{db2, db, 8080, "tcp", false}, // the new db2 is a friend; the old port is not it
		{db2, a, 8080, "tcp", false},
		{friend, db2, 8080, "tcp", false},
	}...)

	// A new pod reusing the address of a pod still in the API (a friend
	// whose object is not deleted yet): not admitted until that pod is
	// gone, so it never passes as the friend.
	ghost := c.CreatePod(t, "ghost", n1.name, map[string]string{"role": "friend"})
	newcomerObj := c.CreatePod(t, "newcomer", n1.name, map[string]string{"app": "newcomer"})
	newcomer, err := cniAddConf(t, n1, withAdmissionTimeout(t, n1.cniConf, "0s"), bed.cniBin, "newcomer", string(newcomerObj.UID))
	if err != nil {
		t.Fatal(err)
	}
	c.SetPodRunning(t, ghost, newcomer.Addrs)
	c.SetPodRunning(t, newcomerObj, newcomer.Addrs)
	time.Sleep(2 * time.Second)
	probe(t, "reused address, previous pod still in the API", flow{newcomer, db, 8080, "tcp", false})
	if err := pods.Delete(ctx, "ghost", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	livecluster.Eventually(t, 60*time.Second, "newcomer admitted", func() error {
		return newcomer.ProbeTCP(netip.AddrPortFrom(a.IPv4(), 8080), time.Second)
	})
	probe(t, "reused address, previous pod gone", flow{newcomer, db, 8080, "tcp", false}, flow{newcomer, a, 8080, "tcp", true})
}

// cniAddConf is cniAdd with another network configuration.
func cniAddConf(t *testing.T, n *simNode, conf []byte, cniBin, name, uid string) (*ovsenv.Pod, error) {
	t.Helper()
	orig := n.cniConf
	n.cniConf = conf
	defer func() { n.cniConf = orig }()
	return cniAdd(t, n, cniBin, name, uid)
}

// withAdmissionTimeout is conf with tierflow-cni's admissionTimeout set.
func withAdmissionTimeout(t *testing.T, conf []byte, d string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["admissionTimeout"] = d
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
