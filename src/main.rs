fn main() {
    phasescope::clock::init();
}
