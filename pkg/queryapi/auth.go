package queryapi

import "github.com/tierflow/tierflow/pkg/kubeauth"

// The RBAC resource a query needs "get" on.
const (
	AuthGroup    = "tierflow.io"
	AuthResource = "queries"
)

// queryAction is what a request of endpoint needs: get on the queries
// resource of that name.
func queryAction(endpoint string) kubeauth.Action {
	return kubeauth.ResourceAction("get", AuthGroup, AuthResource, endpoint)
}
