cat <<EOF
$(curl x) `wget y` $((1 + $(z)))
EOF
find . -exec sudo -u root env -S 'curl x' {} \; ; echo $'\x63url' <(ls) >(wc)
