"""What the benchmarks share: their command line, their result line, and the processes they drive."""
