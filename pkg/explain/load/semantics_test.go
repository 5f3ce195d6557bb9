package load

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
)

// semanticsCluster is the cluster every TestAPISemantics case runs in:
// manifests as a user writes them, read, defaulted and computed exactly as
// tierctl explain does. Each pod's role in the checklist is in its name.
const semanticsCluster = `
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {team: x}}
---
apiVersion: v1
kind: Namespace
metadata: {name: "y", labels: {team: "y"}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {role: worker}}
spec: {podCIDRs: [10.10.1.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}, {type: Hostname, address: n1}]}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {role: infra}}
spec: {podCIDRs: [10.10.2.0/24, "fd00:10:2::/64"]}
status: {addresses: [{type: InternalIP, address: 192.168.0.2}, {type: ExternalIP, address: 203.0.113.2}]}
---
# Two containers declare the port name "web" with different numbers
# (allowed: container port names are unique per container only).
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {app: a}}
spec:
  nodeName: n1
  containers:
  - name: c1
    ports: [{name: web, containerPort: 80}, {name: dns, containerPort: 53, protocol: UDP}, {name: assoc, containerPort: 3868, protocol: SCTP}]
  - name: c2
    ports: [{name: web, containerPort: 8080}]
status: {phase: Running, podIPs: [{ip: 10.0.0.1}, {ip: "fd00::1"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: x, labels: {app: b}}
spec: {nodeName: n2, containers: [{name: c, ports: [{name: web, containerPort: 9090}]}]}
status: {phase: Running, podIPs: [{ip: 10.0.0.2}, {ip: "fd00::2"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: "y", labels: {app: a}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {phase: Running, podIPs: [{ip: 10.0.1.1}, {ip: "fd00::1:1"}]}
---
# A sidecar (init container with restartPolicy Always) serves "metrics"
# for the pod's whole life; a run-to-completion init container's "setup"
# port is not served.
apiVersion: v1
kind: Pod
metadata: {name: sidecar, namespace: x, labels: {app: sidecar}}
spec:
  nodeName: n2
  initContainers:
  - {name: proxy, restartPolicy: Always, ports: [{name: metrics, containerPort: 15090}]}
  - {name: setup, ports: [{name: setup, containerPort: 7000}]}
  containers: [{name: c, ports: [{name: web, containerPort: 80}]}]
status: {phase: Running, podIPs: [{ip: 10.0.0.3}]}
---
# Terminating (graceful deletion in progress): still running, still has its
# IP, still takes part in policy until it is deleted.
apiVersion: v1
kind: Pod
metadata: {name: terminating, namespace: "y", labels: {app: a}, deletionTimestamp: "2026-01-01T00:00:00Z"}
spec: {nodeName: n2, containers: [{name: c}]}
status: {phase: Running, podIPs: [{ip: 10.0.1.2}]}
---
# Completed: its IP may already belong to another pod.
apiVersion: v1
kind: Pod
metadata: {name: done, namespace: "y", labels: {app: a}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {phase: Succeeded, podIPs: [{ip: 10.0.1.3}]}
---
# Pending, no IP yet: already a subject (pkg/compute), but no end of a
# connection explain can evaluate.
apiVersion: v1
kind: Pod
metadata: {name: pending, namespace: "y", labels: {app: a}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {phase: Pending}
---
# Host network: its address is the node's.
apiVersion: v1
kind: Pod
metadata: {name: host, namespace: "y", labels: {app: a}}
spec: {nodeName: n2, hostNetwork: true, containers: [{name: c}]}
status: {phase: Running, podIPs: [{ip: 192.168.0.2}]}
`

// probe is one connection and the verdict the API texts require.
type probe struct {
	src, dst string // NS/POD or an address
	port     string // PROTO/NUMBER
	allow    bool
}

func (p probe) String() string {
	v := "deny"
	if p.allow {
		v = "allow"
	}
	return fmt.Sprintf("%s -> %s %s (%s)", p.src, p.dst, p.port, v)
}

func endpoint(s string) explain.Endpoint {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return explain.Endpoint{Pod: &model.PodRef{Namespace: ns, Name: name}}
	}
	return explain.Endpoint{IP: netip.MustParseAddr(s)}
}

// TestAPISemantics checks, end to end (manifests → pkg/compute → explain),
// the behavioural sentences of the policy API texts that are easy to get
// wrong. Each case names the sentence (or the choice where the texts are
// silent, see pkg/compute/SEMANTICS.md) it proves.
func TestAPISemantics(t *testing.T) {
	cases := []struct {
		name     string
		policies string
		// conditions that must be reported (Reason substrings), if any.
		conditions []string
		probes     []probe
	}{
		{
			name: "no policy: everything allowed",
			probes: []probe{
				{"x/a", "x/b", "TCP/80", true},
				{"x/a", "10.9.9.9", "UDP/53", true},
			},
		},
		{
			name: "terminating pods stay subjects and peers; completed and host-network pods are neither",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-from-app-a, namespace: x}
spec:
  podSelector: {}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: "y"}}, podSelector: {matchLabels: {app: a}}}]
`,
			probes: []probe{
				{"y/a", "x/b", "TCP/80", true},
				{"y/terminating", "x/b", "TCP/80", true},
				// The completed pod's and the host-network pod's addresses
				// are not pods of the peer.
				{"10.0.1.3", "x/b", "TCP/80", false},
				{"192.168.0.2", "x/b", "TCP/80", false},
			},
		},
		{
			name: "NetworkPolicy: policyTypes omitted with ingress only leaves egress open",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-in, namespace: x}
spec: {podSelector: {matchLabels: {app: a}}}
`,
			probes: []probe{
				{"x/b", "x/a", "TCP/80", false},
				{"x/a", "x/b", "TCP/80", true},
				{"x/a", "8.8.8.8", "UDP/53", true},
			},
		},
		{
			name: "NetworkPolicy: policyTypes [Egress] without rules isolates egress only",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-out, namespace: x}
spec: {podSelector: {matchLabels: {app: a}}, policyTypes: [Egress]}
`,
			probes: []probe{
				{"x/a", "x/b", "TCP/80", false},
				{"x/b", "x/a", "TCP/80", true},
			},
		},
		{
			name: "NetworkPolicy: empty from (rule {}) allows all sources; empty podSelector is the policy's namespace only",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: all-in, namespace: x}
spec:
  podSelector: {}
  ingress: [{}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: ns-only, namespace: "y"}
spec:
  podSelector: {}
  ingress: [{from: [{podSelector: {}}]}]
`,
			probes: []probe{
				{"y/a", "x/a", "TCP/1", true},
				{"8.8.8.8", "x/b", "UDP/5000", true},
				{"x/a", "y/a", "TCP/80", false},
				{"y/terminating", "y/a", "TCP/80", true},
			},
		},
		{
			name: "NetworkPolicy: from with namespaceSelector {} selects every pod of every namespace",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: any-pod, namespace: "y"}
spec:
  podSelector: {}
  ingress: [{from: [{namespaceSelector: {}}]}]
`,
			probes: []probe{
				{"x/a", "y/a", "TCP/80", true},
				{"8.8.8.8", "y/a", "TCP/80", false},
			},
		},
		{
			name: "NetworkPolicy: port with endPort is an inclusive range of that protocol",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: range, namespace: x}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress: [{ports: [{port: 8000, endPort: 8080}]}]
`,
			probes: []probe{
				{"x/a", "x/b", "TCP/8000", true},
				{"x/a", "x/b", "TCP/8080", true},
				{"x/a", "x/b", "TCP/8081", false},
				{"x/a", "x/b", "TCP/7999", false},
				{"x/a", "x/b", "UDP/8000", false},
			},
		},
		{
			name: "NetworkPolicy: named ports resolve on the destination pod with the rule's protocol; a name two containers declare matches both numbers",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: named, namespace: x}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress:
  - ports: [{port: web}, {port: dns, protocol: UDP}, {port: assoc, protocol: SCTP}]
  - ports: [{port: dns}]
`,
			probes: []probe{
				{"x/b", "x/a", "TCP/80", true},
				{"x/b", "x/a", "TCP/8080", true},
				{"x/b", "x/a", "TCP/9090", false}, // b's "web", not a's
				{"x/b", "x/a", "UDP/53", true},
				{"x/b", "x/a", "TCP/53", false}, // dns is UDP; {port: dns} means TCP
				{"x/b", "x/a", "SCTP/3868", true},
			},
		},
		{
			name: "NetworkPolicy: named ports of sidecar containers resolve; those of run-to-completion init containers do not",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: sidecar-ports, namespace: x}
spec:
  podSelector: {matchLabels: {app: sidecar}}
  ingress: [{ports: [{port: metrics}, {port: web}, {port: setup}]}]
`,
			probes: []probe{
				{"x/a", "x/sidecar", "TCP/15090", true},
				{"x/a", "x/sidecar", "TCP/80", true},
				{"x/a", "x/sidecar", "TCP/7000", false},
			},
		},
		{
			name: "NetworkPolicy: egress named port resolves on the destination, also through an ipBlock",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: out-named, namespace: x}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 10.0.0.0/24}}]
    ports: [{port: web}]
`,
			probes: []probe{
				{"x/b", "x/a", "TCP/80", true},
				{"x/b", "x/a", "TCP/8080", true},
				{"x/b", "x/a", "TCP/9090", false},
				{"x/b", "y/a", "TCP/80", false},      // outside the block
				{"x/b", "10.0.0.9", "TCP/80", false}, // no pod: no name
			},
		},
		{
			name: "NetworkPolicy: ipBlock except, IPv6 blocks, dual-stack pods",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: blocks, namespace: "y"}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress:
  - from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.0.0.2/32]}}, {ipBlock: {cidr: "fd00::2/128"}}]
`,
			probes: []probe{
				{"x/a", "y/a", "TCP/80", true},
				{"10.0.0.2", "y/a", "TCP/80", false},
				{"fd00::2", "y/a", "TCP/80", true},
				{"fd00::3", "y/a", "TCP/80", false},
			},
		},
		{
			name: "NetworkPolicy: SCTP port and a port with protocol only",
			policies: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: sctp, namespace: x}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress: [{ports: [{protocol: SCTP, port: 3868}, {protocol: UDP}]}]
`,
			probes: []probe{
				{"x/a", "x/b", "SCTP/3868", true},
				{"x/a", "x/b", "TCP/3868", false},
				{"x/a", "x/b", "UDP/1", true},
			},
		},
		{
			name: "AdminNetworkPolicy: Pass goes to NetworkPolicy, and to the BaselineAdminNetworkPolicy when no NetworkPolicy selects the pod",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: pass}
spec:
  priority: 5
  subject: {namespaces: {}}
  ingress:
  - {action: Pass, from: [{namespaces: {}}]}
  - {action: Allow, from: [{namespaces: {}}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-b, namespace: x}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
`,
			probes: []probe{
				{"x/a", "x/b", "TCP/80", true},     // NetworkPolicy allows
				{"y/a", "x/b", "TCP/80", false},    // isolated by the NetworkPolicy
				{"x/b", "x/a", "TCP/80", false},    // no NetworkPolicy: BANP denies
				{"8.8.8.8", "x/a", "TCP/80", true}, // no rule matches an outside address
			},
		},
		{
			name: "AdminNetworkPolicy: lower priority number first, rules in order; Allow beats a NetworkPolicy",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: z-first}
spec:
  priority: 1
  subject: {pods: {namespaceSelector: {matchLabels: {team: x}}, podSelector: {matchLabels: {app: b}}}}
  ingress:
  - {action: Allow, from: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: a}}}}], ports: [{portNumber: {port: 80}}]}
  - {action: Deny, from: [{namespaces: {}}]}
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: a-second}
spec:
  priority: 2
  subject: {namespaces: {}}
  ingress: [{action: Allow, from: [{namespaces: {}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: x}
spec: {podSelector: {}}
`,
			probes: []probe{
				{"y/a", "x/b", "TCP/80", true},
				{"y/a", "x/b", "TCP/81", false},
				{"y/a", "x/a", "TCP/81", true}, // a-second allows, past the NetworkPolicy
			},
		},
		{
			name: "AdminNetworkPolicy: egress nodes and networks peers; networks 0.0.0.0/0 also matches pods",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: egress}
spec:
  priority: 3
  subject: {namespaces: {matchLabels: {team: x}}}
  egress:
  - {action: Allow, to: [{nodes: {matchLabels: {role: infra}}}], ports: [{portRange: {start: 6443, end: 6444}}]}
  - {action: Deny, to: [{networks: ["0.0.0.0/0"]}]}
`,
			probes: []probe{
				{"x/a", "192.168.0.2", "TCP/6443", true},
				{"x/a", "203.0.113.2", "TCP/6444", true},
				{"x/a", "192.168.0.1", "TCP/6443", false},
				{"x/a", "192.168.0.2", "UDP/6443", false},
				{"x/a", "y/a", "TCP/80", false},
				{"x/a", "fd00::1:1", "TCP/80", true}, // IPv6 not covered
				// "ANPs with no ingress rules do not affect ingress traffic."
				{"y/a", "x/a", "TCP/80", true},
			},
		},
		{
			// A pod reaches a node's host (its kubelet) by the node's
			// gateway address too (tierflow's noEncap gateway: the first
			// address of each pod CIDR), so a nodes peer includes it.
			name: "AdminNetworkPolicy: a nodes peer includes the nodes' gateway addresses",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: no-nodes}
spec:
  priority: 3
  subject: {namespaces: {matchLabels: {team: x}}}
  egress:
  - {action: Deny, to: [{nodes: {}}]}
`,
			probes: []probe{
				{"x/a", "192.168.0.1", "TCP/10250", false},
				{"x/a", "10.10.1.1", "TCP/10250", false},
				{"x/a", "10.10.2.1", "TCP/10250", false},
				{"x/a", "fd00:10:2::1", "TCP/10250", false},
				{"x/a", "10.10.1.2", "TCP/10250", true}, // not a gateway address
				{"y/a", "10.10.1.1", "TCP/10250", true}, // not a subject
			},
		},
		{
			name: "AdminNetworkPolicy: namedPort uses the container port's own protocol",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: named}
spec:
  priority: 3
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: a}}}}
  ingress:
  - {action: Deny, from: [{namespaces: {}}], ports: [{namedPort: dns}, {namedPort: web}]}
`,
			probes: []probe{
				{"x/b", "x/a", "UDP/53", false},
				{"x/b", "x/a", "TCP/53", true},
				{"x/b", "x/a", "TCP/8080", false},
				{"x/b", "x/a", "TCP/81", true},
			},
		},
		{
			name: "BaselineAdminNetworkPolicy: only \"default\" takes effect; Pass is no BANP action and fails closed (deny all)",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: other}
spec:
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {matchLabels: {team: "y"}}}
  ingress: [{action: Pass, from: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: b}}}}]}]
`,
			conditions: []string{"NotDefaultBaseline", "UnknownAction"},
			probes: []probe{
				{"x/a", "x/b", "TCP/80", true},
				{"x/a", "y/a", "TCP/80", false},
			},
		},
		{
			name: "ClusterNetworkPolicy: Accept/Deny/Pass in the Admin tier, protocols with a range and destinationNamedPort",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: admin}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {matchLabels: {team: x}}}
  ingress:
  - {action: Pass, from: [{namespaces: {matchLabels: {team: "y"}}}], protocols: [{tcp: {destinationPort: {range: {start: 1, end: 100}}}}]}
  - {action: Accept, from: [{namespaces: {}}], protocols: [{destinationNamedPort: web}]}
  - {action: Deny, from: [{namespaces: {}}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: x}
spec: {podSelector: {}}
`,
			probes: []probe{
				{"y/a", "x/a", "TCP/80", false},  // passed to the NetworkPolicy, which isolates
				{"y/a", "x/a", "TCP/8080", true}, // Accept beats the NetworkPolicy
				{"x/a", "x/b", "TCP/9090", true},
				{"x/a", "x/b", "TCP/80", false},
				{"x/a", "x/b", "UDP/9090", false},
			},
		},
		{
			name: "ClusterNetworkPolicy: Baseline tier is overridden by NetworkPolicy; Pass there is the default allow",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: baseline}
spec:
  tier: Baseline
  priority: 0
  subject: {namespaces: {}}
  ingress:
  - {action: Pass, from: [{namespaces: {matchLabels: {team: x}}}], protocols: [{udp: {destinationPort: {number: 53}}}]}
  - {action: Deny, from: [{namespaces: {}}]}
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow, namespace: "y"}
spec:
  podSelector: {}
  ingress: [{}]
`,
			probes: []probe{
				{"x/a", "y/a", "TCP/80", true},
				{"x/a", "x/b", "TCP/80", false},
				{"x/a", "x/b", "UDP/53", true},
			},
		},
		{
			name: "ClusterNetworkPolicy: domainNames is not implemented, so an Accept rule with it matches nothing",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: fqdn}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {matchLabels: {team: x}}}
  egress:
  - {action: Accept, to: [{domainNames: ["example.com"]}]}
  - {action: Deny, to: [{networks: ["0.0.0.0/0", "::/0"]}]}
`,
			conditions: []string{"UnsupportedPeer"},
			probes: []probe{
				{"x/a", "93.184.216.34", "TCP/443", false},
				{"x/b", "y/a", "TCP/80", false},
			},
		},
		{
			name: "Pass leaves the whole Admin tier: a later Admin-tier ClusterNetworkPolicy is skipped",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: pass-x}
spec:
  priority: 5
  subject: {namespaces: {matchLabels: {team: x}}}
  ingress: [{action: Pass, from: [{namespaces: {matchLabels: {team: x}}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: deny-all}
spec:
  tier: Admin
  priority: 6
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
`,
			probes: []probe{
				{"x/a", "x/b", "TCP/80", true},
				{"y/a", "x/b", "TCP/80", false},
				{"x/a", "y/a", "TCP/80", false},
			},
		},
		{
			name: "ANP and CNP of the same priority: the AdminNetworkPolicy is evaluated first (both warned)",
			policies: `
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: a-cnp}
spec:
  tier: Admin
  priority: 7
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: z-anp}
spec:
  priority: 7
  subject: {namespaces: {}}
  ingress: [{action: Allow, from: [{namespaces: {matchLabels: {team: x}}}]}]
`,
			conditions: []string{"SamePriority"},
			probes: []probe{
				{"x/a", "y/a", "TCP/80", true},
				{"y/a", "x/a", "TCP/80", false},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Build(read(t, semanticsCluster+"\n---\n"+tc.policies))
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(b.Conditions, "\n")
			for _, want := range tc.conditions {
				if !strings.Contains(all, want) {
					t.Errorf("no %s condition reported; conditions:\n%s", want, all)
				}
			}
			if len(tc.conditions) == 0 && len(b.Conditions) > 0 {
				t.Errorf("unexpected conditions:\n%s", all)
			}
			ev, err := explain.NewEvaluator(b.Snapshot, b.Inventory)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.probes {
				proto, num, _ := strings.Cut(p.port, "/")
				var port int32
				fmt.Sscan(num, &port)
				res, err := ev.Explain(explain.Query{Src: endpoint(p.src), Dst: endpoint(p.dst), Protocol: model.Protocol(proto), Port: port})
				if err != nil {
					t.Errorf("%v: %v", p, err)
					continue
				}
				if got := res.Verdict == explain.VerdictAllow; got != p.allow {
					t.Errorf("%v: got %s (egress %s/%s, ingress %s/%s)", p, res.Verdict,
						res.Egress.Tier, res.Egress.Reason, res.Ingress.Tier, res.Ingress.Reason)
				}
			}
		})
	}
}
