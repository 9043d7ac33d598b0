# The L0-random bundle a device script runs on, built once a machine under MEDIAQUAL_BUNDLES
# (default /tmp/bundles); sourced by the scripts here:
#   source scripts/gpu-runs/bundle.sh; bundle=$(l0_bundle BUILDER) || exit 1
# BUILDER: wan (Wan2.1-T2V-1.3B), wan22 (Wan2.2-TI2V-5B, the Wan builder's --wan22) or qwenimage
# (Qwen-Image-Edit-2511). (MiniMax-H3's bundle is configs only, a few kB: minimax-native.sh makes
# it afresh each run.) The device's 64 GB disk holds one big bundle at a time (Qwen's is
# 57.7 GB): the other family's goes first. The build's log is $TMPDIR/build-BUILDER.log (TMPDIR
# default /tmp), its tail on stderr. Prints the bundle's directory.
l0_bundle() {
	local root=${MEDIAQUAL_BUNDLES:-/tmp/bundles} log=${TMPDIR:-/tmp}/build-$1.log dir other build
	case $1 in
	wan) dir=Wan-AI/Wan2.1-T2V-1.3B-Diffusers other=Qwen build=(models/wan/build_l0.py) ;;
	wan22) dir=Wan-AI/Wan2.2-TI2V-5B-Diffusers other=Qwen build=(models/wan/build_l0.py --wan22) ;;
	qwenimage) dir=Qwen/Qwen-Image-Edit-2511 other=Wan-AI build=(models/qwenimage/build_l0.py) ;;
	*)
		echo "l0_bundle: unknown builder '$1' (wan, wan22 or qwenimage)" >&2
		return 2
		;;
	esac
	rm -rf "${root:?}/$other"
	if [ ! -f "$root/$dir/model_index.json" ]; then
		local t0=$SECONDS
		echo "l0_bundle: building $root/$dir: python3 ${build[*]} --out $root" >&2
		if ! python3 "${build[@]}" --out "$root" >"$log" 2>&1; then
			tail -20 "$log" >&2
			return 1
		fi
		tail -3 "$log" >&2
		echo "l0_bundle: built in $((SECONDS - t0)) s" >&2
	fi
	echo "$root/$dir"
}
