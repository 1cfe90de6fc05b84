// Command etcd is upstream etcd's server, built from the pinned go.etcd.io/etcd/server/v3 module.
// The 3.5 line keeps its main package in the root module go.etcd.io/etcd/v3, which is not meant to
// be required; this wrapper calls the same entry point (etcdmain.Main) that upstream's main.go does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
