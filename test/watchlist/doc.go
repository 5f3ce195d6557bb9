// Package watchlist serves a streamed initial list the way kube-apiserver
// serves one to a watch that asks for its initial events
// (sendInitialEvents, client-go's WatchList): each object an Added event,
// then a bookmark annotated k8s.io/initial-events-end, then the events of
// an ordinary watch. Tests and benchmarks put it behind a fake
// clientset's Watch to reach the code paths client-go's reflectors take
// against such a server, which the kube-apiserver this repository runs
// (on etcd 3.4) cannot serve.
package watchlist
