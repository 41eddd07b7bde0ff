// Command gitserver serves the bare Git repositories under one directory over smart HTTP on one
// loopback address (github.com/fluxcd/gitkit, the server of Flux's own gittestserver, which runs
// `git upload-pack`/`git receive-pack`), for Argo CD and Flux in e2e/gitops-test: go-git, which
// both use, does not speak Git's dumb HTTP protocol, and Flux accepts only http, https and ssh URLs.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/fluxcd/gitkit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "loopback address to listen on")
	dir := flag.String("dir", "", "directory holding the bare repositories (<name>.git)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("gitserver: --dir is required")
	}
	service := gitkit.New(gitkit.Config{Dir: *dir, AutoCreate: true})
	if err := service.Setup(); err != nil {
		log.Fatalf("gitserver: setup of %s: %v", *dir, err)
	}
	server := &http.Server{Addr: *addr, Handler: service, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("gitserver serving %s on http://%s", *dir, *addr)
	log.Fatal(server.ListenAndServe())
}
