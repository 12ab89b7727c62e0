# sandbox-sync cp: what the sandbox path $1 is: d (a directory, through
# any symlink), f (anything else that exists) or m (missing).
if [ -d "$1" ]; then echo d; elif [ -e "$1" ]; then echo f; else echo m; fi
