"""Who owns a GPU process: procfs + passwd (user), cgroup (pod/job/container), allocation."""
