package watchlist

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// ResourceVersion is the resource version of the served state (the
// bookmark that ends the initial events carries it).
const ResourceVersion = "1"

// WantsInitialEvents reports whether a watch asks for the initial list as
// a stream.
func WantsInitialEvents(opts metav1.ListOptions) bool {
	return opts.SendInitialEvents != nil && *opts.SendInitialEvents
}

// Serve answers a watch that asks for the initial events. stream sends
// the objects of the initial list, each through send, which reports
// false once the watcher was stopped (stream should then return). end is
// an empty object of the kind, made the bookmark. After the bookmark the
// events of rest's watch (of all objects, no options) follow. buffer is
// how many events wait for the reader before stream blocks, as on a
// connection.
func Serve(ctx context.Context, stream func(send func(runtime.Object) bool), end runtime.Object, buffer int,
	rest func(context.Context, metav1.ListOptions) (watch.Interface, error)) (watch.Interface, error) {
	m, err := meta.Accessor(end)
	if err != nil {
		return nil, fmt.Errorf("watchlist: bookmark of %T: %w", end, err)
	}
	m.SetResourceVersion(ResourceVersion)
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	after, err := rest(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	events := make(chan watch.Event, buffer)
	w := watch.NewProxyWatcher(events)
	go func() {
		defer close(events)
		defer after.Stop()
		stopped := false
		send := func(e watch.Event) bool {
			if !stopped {
				select {
				case events <- e:
				case <-w.StopChan():
					stopped = true
				}
			}
			return !stopped
		}
		stream(func(o runtime.Object) bool { return send(watch.Event{Type: watch.Added, Object: o}) })
		if !send(watch.Event{Type: watch.Bookmark, Object: end}) {
			return
		}
		for e := range after.ResultChan() {
			if !send(e) {
				return
			}
		}
	}()
	return w, nil
}
