// Package statusbridge connects the distribution server's realization
// summaries to the controller's status writer: the server is a
// controller.RealizationSource, and each summary change asks the
// controller to rewrite that policy's status. It lives apart from both so
// neither package imports the other.
//
//	var ctrl *controller.Controller
//	notify := statusbridge.Notifier{}
//	srv := server.New(engine, authn, server.Options{OnSummary: notify.Sink})
//	ctrl = controller.New(..., Config{Realization: statusbridge.Source{Server: srv}})
//	notify.Set(ctrl)
package statusbridge
