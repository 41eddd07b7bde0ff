// Command miniredis serves an in-memory Redis (github.com/alicebob/miniredis/v2, the server Argo CD's
// own tests use) on one loopback address, for Argo CD's application controller and repo server in
// e2e/gitops-test: Argo CD needs a Redis for its caches, and the opt-in test keeps everything a host
// process built from the Go module proxy.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "loopback address to listen on")
	flag.Parse()
	srv := miniredis.NewMiniRedis()
	if err := srv.StartAddr(*addr); err != nil {
		log.Fatalf("miniredis: listen on %s: %v", *addr, err)
	}
	log.Printf("miniredis listening on %s", srv.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	srv.Close()
}
