module github.com/sandbash/sandbash

go 1.25

require golang.org/x/sys v0.49.0 // indirect
